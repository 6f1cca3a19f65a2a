package bench

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"time"
)

// Machine describes where the benchmark ran.
type Machine struct {
	CPUModel      string    `json:"cpu_model"`
	Cores         int       `json:"cores"`
	Kernel        string    `json:"kernel"`
	OS            string    `json:"os"`
	GoVersion     string    `json:"go_version"`
	SoapgwVersion string    `json:"soapgw_version"`
	NginxVersion  string    `json:"nginx_version,omitempty"`
	Hostname      string    `json:"hostname"`
	Date          time.Time `json:"date"`
}

// DescribeMachine gathers Machine for this host.
func DescribeMachine(soapgwVersion string) Machine {
	m := Machine{
		CPUModel:      cpuModel(),
		Cores:         runtime.NumCPU(),
		Kernel:        readTrim("/proc/sys/kernel/osrelease"),
		OS:            osName(),
		GoVersion:     runtime.Version(),
		SoapgwVersion: soapgwVersion,
		Date:          time.Now().UTC().Truncate(time.Second),
	}
	m.Hostname, _ = os.Hostname()
	if p := NginxPath(); p != "" {
		m.NginxVersion = NginxVersion(p)
	}
	return m
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func osName() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}
