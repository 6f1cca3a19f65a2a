package tunnel

import "testing"

func TestNotice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps string // T: Then, F: Fire, C: Cancel, S: Stop (which must report stops)
		runs  int
		stops string // what each S reported, in order: 1 stopped, 0 not
	}{
		{"then, fire", "TF", 1, ""},
		{"fire, then: at once", "FT", 1, ""},
		{"fired twice runs once", "TFF", 1, ""},
		{"cancelled before the fire", "TCF", 0, ""},
		{"cancelled before the then", "CTF", 0, ""},
		{"cancel after the fire changes nothing", "TFC", 1, ""},
		{"never fired", "T", 0, ""},
		{"stopped before the fire", "TSF", 0, "1"},
		{"stopped after the fire", "TFS", 1, "0"},
		{"stopped twice", "TSS", 0, "10"},
		{"stopped, then again", "TSTF", 1, "1"},
		{"stop after a cancel", "TCS", 0, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n Notice
			runs := 0
			stops := ""
			for _, s := range tc.steps {
				switch s {
				case 'T':
					n.Then(func() { runs++ })
				case 'F':
					n.Fire()
				case 'C':
					n.Cancel()
				case 'S':
					stops += map[bool]string{true: "1", false: "0"}[n.Stop()]
				}
			}
			if runs != tc.runs {
				t.Fatalf("%s: ran %d times, want %d", tc.steps, runs, tc.runs)
			}
			if stops != tc.stops {
				t.Fatalf("%s: Stop reported %q, want %q", tc.steps, stops, tc.stops)
			}
		})
	}
}
