package main

import (
	"io"
	"strings"
	"testing"
)

// TestRunRefuses: bad arguments and environment are refused before anything
// is built, each saying what is wrong.
func TestRunRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"extra argument", []string{"now"}, nil, `unexpected arguments ["now"]`},
		{"bad SOURCE_DATE_EPOCH", []string{"--bin", t.TempDir()}, map[string]string{"SOURCE_DATE_EPOCH": "yesterday"}, `SOURCE_DATE_EPOCH "yesterday": want seconds since 1970`},
		{"no programs", []string{"--bin", t.TempDir(), "--recipes", "../../recipes", "--out", t.TempDir()}, nil, "make build and make plugin make it"},
		{"maintainer from DEBEMAIL, checked", []string{"--bin", t.TempDir()}, map[string]string{"DEBFULLNAME": "A", "DEBEMAIL": "a@b>", "SOURCE_DATE_EPOCH": "1"}, `maintainer "A <a@b>>"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := run(tt.args, io.Discard, func(k string) string { return tt.env[k] })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%q) = %v, want an error saying %q", tt.args, err, tt.want)
			}
		})
	}
}
