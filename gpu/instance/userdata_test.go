package instance

import (
	"errors"
	"strings"
	"testing"
)

func TestParseUserData(t *testing.T) {
	tests := []struct {
		name      string
		data      string
		found     bool
		version   string
		notConfig bool
		err       string // substring of the error, "" for none
	}{
		{"a request", "#cloud-config\npackages: [jq]\nkpreload:\n  resources:\n    driver:\n      version: \"2.0.0\"\n", true, "2.0.0", false, ""},
		{"CRLF and a BOM", "\xef\xbb\xbf#cloud-config\r\nkpreload:\r\n  resources:\r\n    driver:\r\n      version: \"535\"\r\n", true, "535", false, ""},
		{"no kpreload key", "#cloud-config\nusers: [default]\n", false, "", false, ""},
		{"empty cloud-config", "#cloud-config\n", false, "", false, ""},
		{"an empty kpreload key: the defaults", "#cloud-config\nkpreload:\n", true, "", false, ""},
		{"MIME multipart", "Content-Type: multipart/mixed; boundary=\"x\"\nMIME-Version: 1.0\n\n--x\n", false, "", true, "not a plain #cloud-config document"},
		{"a script", "#!/bin/sh\necho hi\n", false, "", true, "starts with \"#!/bin/sh\""},
		{"gzip", "\x1f\x8b\x08\x00", false, "", true, "not a plain"},
		{"a wrong field, with its line", "#cloud-config\nusers: [default]\nkpreload:\n  resources:\n    driver:\n      verison: \"2\"\n", true, "", false, "user-data:6: kpreload.resources.driver.verison: unknown field"},
		{"a bad version", "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"2.0.0; rm -rf /\"\n", true, "", false, "user-data:5: kpreload.resources.driver.version"},
		{"kpreload twice", "#cloud-config\nkpreload: {}\nkpreload: {}\n", false, "", false, "user-data:"},
		{"not a mapping", "#cloud-config\n- a\n- b\n", false, "", false, "want a mapping of cloud-config keys"},
		{"not YAML", "#cloud-config\nkpreload: [\n", false, "", false, "user-data: yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, found, err := ParseUserData("user-data", []byte(tt.data))
			if got := errors.Is(err, ErrNotCloudConfig); got != tt.notConfig {
				t.Errorf("errors.Is(err, ErrNotCloudConfig) = %v, want %v (err %v)", got, tt.notConfig, err)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.err)
				}
				return
			}
			if err != nil || found != tt.found {
				t.Fatalf("ParseUserData = %+v, %v, %v; want found %v", in, found, err, tt.found)
			}
			if found && in.Resources.Driver.Version != tt.version {
				t.Errorf("version %q, want %q", in.Resources.Driver.Version, tt.version)
			}
		})
	}
	if _, _, err := ParseUserData("big", []byte("#cloud-config\n"+strings.Repeat("#", MaxUserData))); err == nil {
		t.Errorf("user-data over MaxUserData accepted")
	}
}

// TestFindUserData: a seed's user-data is a source between fw_cfg and the
// image's file; user-data only cloud-init reads, or without a kpreload key,
// yields to the next source with a note; a wrong field is an error naming
// its line, and the next source is used.
func TestFindUserData(t *testing.T) {
	file := func(src, data string, userData bool) File {
		return File{Source: src, Path: src + "-file", UserData: userData, Read: func() ([]byte, error) { return []byte(data), nil }}
	}
	image := file(SourceImage, "resources:\n  driver:\n    version: \"1.0.0\"\n", false)
	noFlags := func(string) (string, bool) { return "", false }
	tests := []struct {
		name       string
		seed       string
		wantSource string
		wantNote   string
		wantErr    string
		// wantAt is where the chosen request's version was written.
		wantAt string
	}{
		{"seed request", "#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  content: |\n    resources:\n      driver:\n        version: \"2.0.0\"\n", SourceSeed, "", "", "seed-file:7"},
		{"seed without a version", "#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  content: |\n    resources:\n      driver:\n        flavor: open\n", SourceSeed, "", "", ""},
		{"MIME seed", "Content-Type: multipart/mixed\n", SourceImage, "seed: user-data is seed-file: not a plain #cloud-config document", "", "image-file:3"},
		{"no key", "#cloud-config\n{}\n", SourceImage, "seed: seed-file has neither a write_files entry for /etc/kpreload/instance.yaml nor a kpreload: key", "", "image-file:3"},
		{"write_files request", "#cloud-config\nwrite_files:\n  - path: /etc/kpreload/instance.yaml\n    content: |\n      resources:\n        driver:\n          version: \"2.0.0\"\n", SourceSeed, "", "", "seed-file:7"},
		{"deprecated key", "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"2.0.0\"\n", SourceSeed, "seed: the top-level kpreload: key of #cloud-config is deprecated", "", "seed-file:5"},
		{"deprecated key, wrong field", "#cloud-config\nkpreload:\n  resource: {}\n", SourceImage, "seed: the top-level kpreload: key of #cloud-config is deprecated", "seed-file:3: kpreload.resource: unknown field", "image-file:3"},
		{"write_files wrong field", "#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  content: |\n    resource: {}\n", SourceImage, "", "instance request from seed ignored: seed-file:5: resource: unknown field", "image-file:3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, errs := Find(noFlags, []File{file(SourceSeed, tt.seed, true), image})
			if req.Source != tt.wantSource || req.VersionAt != tt.wantAt {
				t.Errorf("source %q, version at %q; want %q, %q", req.Source, req.VersionAt, tt.wantSource, tt.wantAt)
			}
			if notes := strings.Join(req.Notes, "\n"); !strings.Contains(notes, tt.wantNote) || (tt.wantNote == "") != (notes == "") {
				t.Errorf("notes %q, want %q", notes, tt.wantNote)
			}
			var es []string
			for _, e := range errs {
				es = append(es, e.Error())
			}
			if got := strings.Join(es, "\n"); !strings.Contains(got, tt.wantErr) || (tt.wantErr == "") != (got == "") {
				t.Errorf("errors %q, want %q", got, tt.wantErr)
			}
		})
	}
}

func TestUserDataRequest(t *testing.T) {
	tests := []struct {
		name, data       string
		found            bool
		version, at, err string
	}{
		{"version", "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"3.0.0\"\n", true, "3.0.0", "cc.txt:5", ""},
		{"no version", "#cloud-config\nkpreload:\n  resources: {}\n", true, "", "", ""},
		{"no key", "#cloud-config\npackages: [vim]\n", false, "", "", ""},
		{"wrong field", "#cloud-config\nkpreload:\n  resource: {}\n", true, "", "", "cc.txt:3: kpreload.resource: unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, found, err := UserDataRequest(SourceUserData, "cc.txt", []byte(tt.data))
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if found != tt.found || req.Instance.Resources.Driver.Version != tt.version || req.VersionAt != tt.at || !strings.Contains(gotErr, tt.err) || (gotErr == "") != (tt.err == "") {
				t.Errorf("got found %v, version %q at %q, err %q; want %v, %q at %q, err %q", found, req.Instance.Resources.Driver.Version, req.VersionAt, gotErr, tt.found, tt.version, tt.at, tt.err)
			}
			if found && err == nil && (req.Source != SourceUserData || req.Origin != "cc.txt") {
				t.Errorf("source %q origin %q", req.Source, req.Origin)
			}
		})
	}
}
