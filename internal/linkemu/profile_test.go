package linkemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProfiles(t *testing.T) {
	want := []string{"loopback", "lan", "wlan", "routed-wlan", "wifi-27", "3g", "gprs"}
	ps := Profiles()
	if len(ps) != len(want) {
		t.Fatalf("%d profiles, want %d", len(ps), len(want))
	}
	for i, p := range ps {
		if p.Name != want[i] {
			t.Errorf("profile %d is %q, want %q", i, p.Name, want[i])
		}
		if err := p.Validate(); err != nil {
			t.Error(err)
		}
		if p.Description == "" {
			t.Errorf("%s: no description", p.Name)
		}
		q, ok := ProfileByName(p.Name)
		if !ok || q != p {
			t.Errorf("ProfileByName(%q) = %+v, %v", p.Name, q, ok)
		}
	}
	if _, ok := ProfileByName("nope"); ok {
		t.Error("ProfileByName(nope) found something")
	}
	ps[0].Name = "changed"
	if Profiles()[0].Name != "loopback" {
		t.Error("Profiles returns shared state")
	}

	// The paper figures, as RTTs for a small packet (ping), and rates.
	rtt := func(name string) time.Duration {
		p, _ := ProfileByName(name)
		ser := func(s Shape) time.Duration {
			if s.RateBps == 0 {
				return 0
			}
			return time.Duration(txTime(84, s.RateBps))
		}
		return p.Up.Delay + p.Down.Delay + ser(p.Up) + ser(p.Down)
	}
	for _, c := range []struct {
		name   string
		lo, hi time.Duration
	}{
		{"loopback", 0, 0},
		{"lan", 90 * time.Microsecond, 110 * time.Microsecond},
		{"wlan", 2300 * time.Microsecond, 2700 * time.Microsecond},
		{"routed-wlan", 13 * time.Millisecond, 15 * time.Millisecond},
		{"wifi-27", 26 * time.Millisecond, 28 * time.Millisecond},
		{"3g", 140 * time.Millisecond, 160 * time.Millisecond},
		{"gprs", 800 * time.Millisecond, 900 * time.Millisecond},
	} {
		if r := rtt(c.name); r < c.lo || r > c.hi {
			t.Errorf("%s: ping RTT %v, want %v..%v", c.name, r, c.lo, c.hi)
		}
	}
	if p, _ := ProfileByName("wifi-27"); p.Up.RateBps != 11*Mbit || p.Down.RateBps != 11*Mbit {
		t.Errorf("wifi-27 rate %d/%d", p.Up.RateBps, p.Down.RateBps)
	}
	if p, _ := ProfileByName("gprs"); p.Down.RateBps != 40*Kbit || p.Down.Loss != 0.02 {
		t.Errorf("gprs %+v", p.Down)
	}
}

func TestProfileValidate(t *testing.T) {
	for _, s := range []Shape{
		{Delay: -1}, {Jitter: -1}, {Loss: 1.5}, {Duplicate: -0.1}, {Reorder: 2},
		{RateBps: -1}, {QueueBytes: -1}, {Delay: 2 * time.Minute},
	} {
		if err := (Profile{Name: "x", Down: s}).Validate(); err == nil {
			t.Errorf("Validate accepted %+v", s)
		}
	}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "profiles.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadProfiles(t *testing.T) {
	path := writeFile(t, `
# user profiles
- name: office-wifi
  description: measured with ping
  both: {delay: 7ms, jitter: 2ms, loss: 0.5%}
  down: {rate: 11Mbit, queue: 64KiB}
- name: sat
  up:
    delay: 300ms
    rate: 256kbit/s
    queue: 16KB
    duplicate: 0.001
    reorder: 1%
  down:
    delay: 0.3s
    rate: "2Mbps"
    loss: 0
- name: plain
`)
	ps, err := LoadProfiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 {
		t.Fatalf("%d profiles", len(ps))
	}
	o := ps[0]
	wantUp := Shape{Delay: 7 * time.Millisecond, Jitter: 2 * time.Millisecond, Loss: 0.005}
	wantDown := wantUp
	wantDown.RateBps, wantDown.QueueBytes = 11_000_000, 65536
	if o.Name != "office-wifi" || o.Description != "measured with ping" || o.Up != wantUp || o.Down != wantDown {
		t.Errorf("office-wifi = %+v", o)
	}
	s := ps[1]
	if s.Up != (Shape{Delay: 300 * time.Millisecond, RateBps: 256_000, QueueBytes: 16000, Duplicate: 0.001, Reorder: 0.01}) ||
		s.Down != (Shape{Delay: 300 * time.Millisecond, RateBps: 2_000_000}) {
		t.Errorf("sat = %+v", s)
	}
	if !ps[2].Up.IsZero() || !ps[2].Down.IsZero() {
		t.Errorf("plain = %+v", ps[2])
	}
}

func TestLoadProfilesErrors(t *testing.T) {
	for _, c := range []struct {
		text, want string
	}{
		{"- name: a\n  up: {delay: 7}\n", ":2: a.up.delay \"7\": want a duration"},
		{"- name: a\n  both:\n    loss: 1.5\n", ":3: a.both.loss \"1.5\": must be in [0, 1]"},
		{"- name: a\n  both:\n    rate: 11Mbyte\n", ":3: a.both.rate"},
		{"- name: a\n  down:\n    queue: 1.5B\n", ":3: a.down.queue"},
		{"- name: a\n  up:\n    latency: 1ms\n", ":3: a.up: unknown key \"latency\""},
		{"- name: a\n  sideways: {}\n", ":2: unknown key \"sideways\""},
		{"- description: no name\n", ":1: profile without a name"},
		{"- name: a\n- name: b\n- name: a\n", ":3: profile \"a\" already defined at line 1"},
		{"name: a\n", ":1: want a list of profiles"},
		{"- name: a\n  up: [1, 2]\n", ":2: a.up: want a mapping"},
		{"- name: a\n  up: {delay: 1ms\n", ": did not find expected"},
		{"- name: a\n\tup: {}\n", ":2: "},
		{"", ":1: no profiles"},
	} {
		path := writeFile(t, c.text)
		_, err := LoadProfiles(path)
		if err == nil || !strings.HasPrefix(err.Error(), path+":") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.text, err, path+c.want)
		}
	}
	if _, err := LoadProfiles(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("missing file: no error")
	}
}

func TestParseUnits(t *testing.T) {
	for in, want := range map[string]int64{
		"11Mbit": 11e6, "40kbit": 40e3, "1.5Mbit/s": 1.5e6, "2Mbps": 2e6, "64000": 64e3, "1 Gbit": 1e9, "100k": 1e5,
	} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]int64{"64KiB": 65536, "16KB": 16000, "65536": 65536, "1MiB": 1 << 20, "512B": 512} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "-1Mbit", "5MB/s"} {
		if _, err := parseRate(in); err == nil {
			t.Errorf("parseRate(%q) accepted", in)
		}
	}
	for in, want := range map[string]float64{"0.01": 0.01, "1%": 0.01, "0": 0, "100%": 1} {
		if got, err := parseProbability(in); err != nil || got != want {
			t.Errorf("parseProbability(%q) = %v, %v", in, got, err)
		}
	}
}
