package tunnel

import "testing"

func TestNotice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps string // T: Then, F: Fire, C: Cancel
		runs  int
	}{
		{"then, fire", "TF", 1},
		{"fire, then: at once", "FT", 1},
		{"fired twice runs once", "TFF", 1},
		{"cancelled before the fire", "TCF", 0},
		{"cancelled before the then", "CTF", 0},
		{"cancel after the fire changes nothing", "TFC", 1},
		{"never fired", "T", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n Notice
			runs := 0
			for _, s := range tc.steps {
				switch s {
				case 'T':
					n.Then(func() { runs++ })
				case 'F':
					n.Fire()
				case 'C':
					n.Cancel()
				}
			}
			if runs != tc.runs {
				t.Fatalf("%s: ran %d times, want %d", tc.steps, runs, tc.runs)
			}
		})
	}
}
