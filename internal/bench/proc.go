package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a middle-box process a configuration started (nginx master, soapgw).
type Proc struct {
	Name    string // e.g. "edge", "origin"
	Site    string // "client" or "server"
	LogPath string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	waitErr error
	mu      sync.Mutex
	stopped bool
	final   *Usage // usage when the process was reaped
}

// startProc starts cmd in its own process group with stdout and stderr to logPath.
func startProc(name, site string, cmd *exec.Cmd, logPath string) (*Proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL // never outlive the bench if it dies
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &Proc{Name: name, Site: site, LogPath: logPath, cmd: cmd, logFile: f, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		if st := cmd.ProcessState; st != nil {
			u := Usage{PID: st.Pid(), UserSeconds: st.UserTime().Seconds(), SysSeconds: st.SystemTime().Seconds()}
			p.final = &u
		}
		p.mu.Unlock()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended and, if so, how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.waitErr == nil {
			return true, errors.New("exited")
		}
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs the group.
func (p *Proc) Stop(grace time.Duration) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		<-p.done
		return
	}
	p.stopped = true
	p.mu.Unlock()
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Children that ignored the TERM (an nginx worker finishing a request) go too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// LogTail returns the last n bytes of the process's log.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimSpace(string(b))
}

// Usage is the CPU time and peak memory of a process and its descendants (an nginx
// master and its workers).
type Usage struct {
	PID         int     `json:"pid"`
	Processes   int     `json:"processes"`
	UserSeconds float64 `json:"cpu_user_s"`
	SysSeconds  float64 `json:"cpu_sys_s"`
	// CPUSeconds is the on-CPU time of every thread from /proc/<pid>/task/*/schedstat
	// (nanoseconds, unlike the 10 ms ticks of user and sys time); threads that ended
	// are not counted. 0 when the kernel has no schedstat.
	CPUSeconds float64 `json:"cpu_s"`
	PeakRSS    int64   `json:"peak_rss_bytes"` // sum of VmHWM over the processes
	// IOCalls counts the read- and write-family system calls (syscr + syscw of
	// /proc/<pid>/io: read, write, recvmsg, sendmsg, ...), threads that ended included.
	IOCalls uint64 `json:"io_syscalls"`
	// Slices counts the times a thread was put on a CPU (schedstat's third field):
	// about one per wake-up. Threads that ended are not counted.
	Slices uint64 `json:"timeslices"`
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// Sample reads the current usage of the process tree from /proc.
func (p *Proc) Sample() (Usage, error) {
	pids := processTree(p.PID())
	u := Usage{PID: p.PID()}
	for _, pid := range pids {
		ut, st, err := readCPU(pid)
		if err != nil {
			continue // a worker that just exited
		}
		u.Processes++
		u.UserSeconds += ut
		u.SysSeconds += st
		cpu, slices := readSched(pid)
		u.CPUSeconds += cpu
		u.Slices += slices
		u.IOCalls += readIOCalls(pid)
		if hwm, err := readHWM(pid); err == nil {
			u.PeakRSS += hwm
		}
	}
	if u.Processes == 0 {
		return u, fmt.Errorf("%s: process %d not found in /proc", p.Name, p.PID())
	}
	return u, nil
}

// ResetPeak resets VmHWM of the process tree (Linux ≥ 4.0, writing 5 to clear_refs),
// so the next Sample reports the peak since now. It reports whether that worked.
func (p *Proc) ResetPeak() bool {
	ok := true
	for _, pid := range processTree(p.PID()) {
		if err := os.WriteFile(filepath.Join("/proc", strconv.Itoa(pid), "clear_refs"), []byte("5"), 0); err != nil {
			ok = false
		}
	}
	return ok
}

// processTree lists pid and its descendants (found through each process's parent).
func processTree(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []int{root}
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, err := readPPID(pid)
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], pid)
	}
	out := []int{root}
	for i := 0; i < len(out) && i < 4096; i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// statFields returns the fields of /proc/<pid>/stat after the command name.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

func readPPID(pid int) (int, error) {
	f, err := statFields(pid)
	if err != nil || len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
	}
	return strconv.Atoi(f[1]) // field 4 of the man page: state is 3, ppid 4
}

// readCPU returns utime and stime (fields 14 and 15) in seconds.
func readCPU(pid int) (user, sys float64, err error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, 0, err
	}
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: bad times", pid)
	}
	return float64(ut) / clockTicks, float64(st) / clockTicks, nil
}

// readHWM returns VmHWM from /proc/<pid>/status in bytes.
func readHWM(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	return parseHWM(b)
}

func parseHWM(status []byte) (int64, error) {
	for line := range strings.SplitSeq(string(status), "\n") {
		v, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmHWM %q", v)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		return n * 1024, err
	}
	return 0, errors.New("no VmHWM")
}

// readSched sums the on-CPU time (in seconds) and the timeslices of the process's threads.
func readSched(pid int) (float64, uint64) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	var ns, slices uint64
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 3 {
			continue
		}
		if v, err := strconv.ParseUint(f[0], 10, 64); err == nil {
			ns += v
		}
		if v, err := strconv.ParseUint(f[2], 10, 64); err == nil {
			slices += v
		}
	}
	return float64(ns) / 1e9, slices
}

// readIOCalls returns syscr + syscw from /proc/<pid>/io (0 when it cannot be read).
func readIOCalls(pid int) uint64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "io"))
	if err != nil {
		return 0
	}
	return parseIOCalls(b)
}

func parseIOCalls(b []byte) uint64 {
	var n uint64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "syscr" && k != "syscw") {
			continue
		}
		if x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			n += x
		}
	}
	return n
}
