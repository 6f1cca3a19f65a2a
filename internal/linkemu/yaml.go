package linkemu

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// LoadProfiles reads user profiles from a YAML file. The file is a list of
// profiles:
//
//	# profiles.yaml
//	- name: my-wifi
//	  description: office Wi-Fi, measured 2024-05 with ping
//	  both: {delay: 7ms, jitter: 2ms, loss: 0.5%}
//	  down: {rate: 11Mbit, queue: 64KiB}
//
// up shapes client-to-server traffic, down the replies; both, if given, is
// the base of both directions, and the fields of up and down override it.
// Shape keys: delay and jitter (Go durations: "7ms", "1.5s"), loss,
// duplicate and reorder (a probability 0..1 or a percentage "1%"), rate
// (bits per second: "11Mbit", "40kbit", "1.5Mbit/s", "2Mbps", "64000"; unlike
// tc, "bps" means bits), queue (bytes: "64KiB", "16KB", "65536").
// Unknown keys, duplicate names and out-of-range values are errors; every
// error starts with "path:line: ".
func LoadProfiles(path string) ([]Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("linkemu: %w", err)
	}
	return parseProfiles(path, data)
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func parseProfiles(path string, data []byte) ([]Profile, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
				return nil, fmt.Errorf("%s:%s: %s", path, m[1], m[2])
			}
		}
		return nil, fmt.Errorf("%s:1: %w", path, err)
	}
	if len(doc.Content) == 0 || len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s:1: no profiles", path)
	}
	root := doc.Content[0]
	if root.Kind != yaml.SequenceNode {
		return nil, nodeErr(path, root, "want a list of profiles")
	}
	seen := map[string]int{}
	var out []Profile
	for _, item := range root.Content {
		p, err := parseProfile(path, item)
		if err != nil {
			return nil, err
		}
		if line, dup := seen[p.Name]; dup {
			return nil, nodeErr(path, item, fmt.Sprintf("profile %q already defined at line %d", p.Name, line))
		}
		seen[p.Name] = item.Line
		out = append(out, p)
	}
	return out, nil
}

func nodeErr(path string, n *yaml.Node, msg string) error {
	return fmt.Errorf("%s:%d: %s", path, n.Line, msg)
}

func parseProfile(path string, n *yaml.Node) (Profile, error) {
	var p Profile
	if n.Kind != yaml.MappingNode {
		return p, nodeErr(path, n, "a profile must be a mapping")
	}
	var up, down, both *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "name":
			if v.Kind != yaml.ScalarNode {
				return p, nodeErr(path, v, "name must be a string")
			}
			p.Name = v.Value
		case "description":
			if v.Kind != yaml.ScalarNode {
				return p, nodeErr(path, v, "description must be a string")
			}
			p.Description = v.Value
		case "up":
			up = v
		case "down":
			down = v
		case "both":
			both = v
		default:
			return p, nodeErr(path, k, fmt.Sprintf("unknown key %q (want name, description, up, down, both)", k.Value))
		}
	}
	if strings.TrimSpace(p.Name) == "" {
		return p, nodeErr(path, n, "profile without a name")
	}
	var base Shape
	if both != nil {
		if err := applyShape(path, p.Name+".both", both, &base); err != nil {
			return p, err
		}
	}
	p.Up, p.Down = base, base
	if up != nil {
		if err := applyShape(path, p.Name+".up", up, &p.Up); err != nil {
			return p, err
		}
	}
	if down != nil {
		if err := applyShape(path, p.Name+".down", down, &p.Down); err != nil {
			return p, err
		}
	}
	if err := p.Up.validate("up"); err != nil {
		return p, nodeErr(path, n, fmt.Sprintf("profile %q: %v", p.Name, err))
	}
	if err := p.Down.validate("down"); err != nil {
		return p, nodeErr(path, n, fmt.Sprintf("profile %q: %v", p.Name, err))
	}
	return p, nil
}

// applyShape sets the fields named in mapping n on s; where prefixes errors.
func applyShape(path, where string, n *yaml.Node, s *Shape) error {
	if n.Kind != yaml.MappingNode {
		return nodeErr(path, n, where+": want a mapping of shape fields")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			return nodeErr(path, v, fmt.Sprintf("%s.%s: want a scalar", where, k.Value))
		}
		var err error
		switch k.Value {
		case "delay":
			s.Delay, err = parseDuration(v.Value)
		case "jitter":
			s.Jitter, err = parseDuration(v.Value)
		case "loss":
			s.Loss, err = parseProbability(v.Value)
		case "duplicate":
			s.Duplicate, err = parseProbability(v.Value)
		case "reorder":
			s.Reorder, err = parseProbability(v.Value)
		case "rate":
			s.RateBps, err = parseRate(v.Value)
		case "queue":
			var q int64
			q, err = parseBytes(v.Value)
			if err == nil && q > math.MaxInt32 {
				err = errors.New("too large")
			}
			s.QueueBytes = int(q)
		default:
			return nodeErr(path, k, fmt.Sprintf("%s: unknown key %q (want delay, jitter, loss, duplicate, reorder, rate, queue)", where, k.Value))
		}
		if err != nil {
			return nodeErr(path, v, fmt.Sprintf("%s.%s %q: %v", where, k.Value, v.Value, err))
		}
	}
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, errors.New("want a duration such as 7ms or 1.5s")
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	return d, nil
}

func parseProbability(s string) (float64, error) {
	t := strings.TrimSpace(s)
	scale := 1.0
	if pct, ok := strings.CutSuffix(t, "%"); ok {
		t, scale = strings.TrimSpace(pct), 0.01
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, errors.New("want a probability such as 0.01 or 1%")
	}
	f *= scale
	if math.IsNaN(f) || f < 0 || f > 1 {
		return 0, errors.New("must be in [0, 1] (or 0%..100%)")
	}
	return f, nil
}

// splitNumber splits "1.5Mbit/s" into 1.5 and "mbit/s" (lower case).
func splitNumber(s string) (float64, string, error) {
	t := strings.TrimSpace(s)
	end := 0
	for end < len(t) && (t[end] >= '0' && t[end] <= '9' || t[end] == '.') {
		end++
	}
	if end == 0 {
		return 0, "", errors.New("want a number")
	}
	f, err := strconv.ParseFloat(t[:end], 64)
	if err != nil {
		return 0, "", errors.New("want a number")
	}
	return f, strings.ToLower(strings.TrimSpace(t[end:])), nil
}

func parseRate(s string) (int64, error) {
	f, unit, err := splitNumber(s)
	if err != nil {
		return 0, fmt.Errorf("%v with a unit such as 11Mbit or 40kbit", err)
	}
	unit = strings.TrimSuffix(unit, "/s")
	mult := map[string]float64{
		"": 1, "bit": 1, "bps": 1,
		"k": 1e3, "kbit": 1e3, "kbps": 1e3,
		"m": 1e6, "mbit": 1e6, "mbps": 1e6,
		"g": 1e9, "gbit": 1e9, "gbps": 1e9,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("unknown rate unit %q (want bit, kbit, Mbit, Gbit)", unit)
	}
	v := f * mult
	if v > 1e12 {
		return 0, errors.New("too large")
	}
	return int64(math.Round(v)), nil
}

func parseBytes(s string) (int64, error) {
	f, unit, err := splitNumber(s)
	if err != nil {
		return 0, fmt.Errorf("%v with an optional unit such as 64KiB or 16KB", err)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
		"kb": 1e3, "mb": 1e6, "gb": 1e9,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("unknown size unit %q (want B, KiB, MiB, KB, MB)", unit)
	}
	v := f * mult
	if v != math.Trunc(v) {
		return 0, errors.New("not a whole number of bytes")
	}
	if v > 1<<40 {
		return 0, errors.New("too large")
	}
	return int64(v), nil
}
