package codec

import "testing"

func TestByName(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   ID
		ok   bool
	}{
		{"identity", Identity, true}, {"gzip", Gzip, true}, {"zstd", Zstd, true}, {"zstd-stream", ZstdStream, true},
		{"token", Token, true}, {"auto", 0, false}, {"", 0, false}, {"brotli", 0, false},
	} {
		id, ok := ByName(tc.name)
		if id != tc.id || ok != tc.ok {
			t.Errorf("ByName(%q) = %v, %v; want %v, %v", tc.name, id, ok, tc.id, tc.ok)
		}
		if ok && id.String() != tc.name {
			t.Errorf("%v.String() = %q", id, id.String())
		}
	}
}
