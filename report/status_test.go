package report

import (
	"testing"
)

// TestScanStatus: the last intact status line's JSON, whatever precedes the
// prefix or ends the line; damaged JSON and other lines are skipped.
func TestScanStatus(t *testing.T) {
	for _, tc := range []struct {
		name, log, want string
	}{
		{"none", "kpreload-up: {\"format\":1}\n", ""},
		{"one", "x\n" + StatusPrefix + `{"booted":true}` + "\r\n", `{"booted":true}`},
		{"after console text", "[  5.1] " + StatusPrefix + `{"a":1}` + "\n", `{"a":1}`},
		{"the last", StatusPrefix + `{"a":1}` + "\n" + StatusPrefix + `{"a":2}` + "\n", `{"a":2}`},
		{"damaged skipped", StatusPrefix + `{"a":1}` + "\n" + StatusPrefix + `{"a":` + "\n", `{"a":1}`},
		{"not an object", StatusPrefix + `"text"` + "\n", ""},
	} {
		if got := string(ScanStatus([]byte(tc.log))); got != tc.want {
			t.Errorf("%s: ScanStatus = %q, want %q", tc.name, got, tc.want)
		}
	}
}
