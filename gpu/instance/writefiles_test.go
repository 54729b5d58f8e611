package instance

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"strings"
	"testing"
)

// gz is data gzip'd.
func gz(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestParseUserDataWriteFiles: the request as cloud-init's write_files entry
// for /etc/kpreload/instance.yaml: its content in each encoding cloud-init
// knows, bounded; the one entry with that exact path is honoured, anything
// that would make /init and cloud-init disagree about the file is an error
// naming the line.
func TestParseUserDataWriteFiles(t *testing.T) {
	const req = "resources:\n  driver:\n    version: \"2.0.0\"\n"
	b64 := base64.StdEncoding.EncodeToString([]byte(req))
	gzb64 := base64.StdEncoding.EncodeToString(gz(t, []byte(req)))
	bomb := base64.StdEncoding.EncodeToString(gz(t, append([]byte("resources: {}\n#"), bytes.Repeat([]byte("x"), MaxFile)...)))
	entry := func(extra string) string {
		return "#cloud-config\nwrite_files:\n  - path: /etc/kpreload/instance.yaml\n" + extra
	}
	literal := entry("    content: |\n      resources:\n        driver:\n          version: \"2.0.0\"\n")
	tests := []struct {
		name    string
		data    string
		found   bool
		version string
		at      string // where the version was asked
		legacy  bool
		err     string // substring of the error, "" for none
	}{
		{"literal block: the user-data's lines", literal, true, "2.0.0", "user-data:7", false, ""},
		{"other files around it", "#cloud-config\nwrite_files:\n- path: /etc/motd\n  content: hi\n- path: /etc/kpreload/instance.yaml\n  owner: root:root\n  permissions: '0644'\n  defer: false\n  content: |\n    resources:\n      driver:\n        version: \"2.0.0\"\n- {path: /etc/other, content: x}\n", true, "2.0.0", "user-data:12", false, ""},
		{"flow content: its own lines", entry("    content: \"resources: {driver: {version: '2.0.0'}}\"\n"), true, "2.0.0", "user-data write_files /etc/kpreload/instance.yaml (text):1", false, ""},
		{"text/plain", entry("    encoding: text/plain\n    content: |\n      resources:\n        driver:\n          version: \"2.0.0\"\n"), true, "2.0.0", "user-data:8", false, ""},
		{"b64", entry("    encoding: b64\n    content: " + b64 + "\n"), true, "2.0.0", "user-data write_files /etc/kpreload/instance.yaml (b64):3", false, ""},
		{"base64, wrapped", entry("    encoding: base64\n    content: |\n      " + b64[:20] + "\n      " + b64[20:] + "\n"), true, "2.0.0", "user-data write_files /etc/kpreload/instance.yaml (base64):3", false, ""},
		{"gzip+base64", entry("    encoding: gzip+base64\n    content: " + gzb64 + "\n"), true, "2.0.0", "user-data write_files /etc/kpreload/instance.yaml (gzip+base64):3", false, ""},
		{"gz+b64, upper case", entry("    encoding: GZ+B64\n    content: " + gzb64 + "\n"), true, "2.0.0", "", false, ""},
		{"gzip of !!binary", entry("    encoding: gzip\n    content: !!binary |\n      " + gzb64 + "\n"), true, "2.0.0", "user-data write_files /etc/kpreload/instance.yaml (gzip !!binary):3", false, ""},
		{"empty content: the defaults", entry("    content: \"\"\n"), true, "", "", false, ""},
		{"no content: the defaults", entry(""), true, "", "", false, ""},
		{"no entry for the file", "#cloud-config\nwrite_files:\n- path: /etc/motd\n  content: hi\n", false, "", "", false, ""},
		{"write_files empty", "#cloud-config\nwrite_files:\n", false, "", "", false, ""},
		{"an entry that is not a mapping", "#cloud-config\nwrite_files: [x, [y]]\n", false, "", "", false, ""},
		{"the deprecated key", "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"2.0.0\"\n", true, "2.0.0", "user-data:5", true, ""},

		{"a wrong field in the block", entry("    content: |\n      resources:\n        driver:\n          verison: \"2\"\n"), true, "", "", false, "user-data:7: resources.driver.verison: unknown field"},
		{"a wrong field, decoded", entry("    encoding: b64\n    content: " + base64.StdEncoding.EncodeToString([]byte("resources:\n  gpu: {cout: 1}\n")) + "\n"), true, "", "", false, "user-data write_files /etc/kpreload/instance.yaml (b64):2: resources.gpu.cout: unknown field"},
		{"both forms", literal + "kpreload: {}\n", false, "", "", false, "user-data:8: both a top-level kpreload: key and a write_files entry for /etc/kpreload/instance.yaml (line 3)"},
		{"the file twice", literal + "  - path: /etc/kpreload/instance.yaml\n    content: \"\"\n", false, "", "", false, "user-data:8: write_files: /etc/kpreload/instance.yaml given twice (lines 3 and 8)"},
		{"write_files twice", literal + "write_files: []\n", false, "", "", false, "user-data:8: write_files: given twice"},
		{"another spelling of the path", "#cloud-config\nwrite_files:\n- path: /etc/kpreload//instance.yaml\n  content: x\n", false, "", "", false, "user-data:3: write_files path \"/etc/kpreload//instance.yaml\": write it as /etc/kpreload/instance.yaml exactly"},
		{"a relative path", "#cloud-config\nwrite_files:\n- path: etc/kpreload/../kpreload/instance.yaml\n", false, "", "", false, "write it as /etc/kpreload/instance.yaml exactly"},
		{"write_files not a list", "#cloud-config\nwrite_files: {path: /etc/kpreload/instance.yaml}\n", false, "", "", false, "user-data:2: write_files: want a list of files, got a mapping"},
		{"append", entry("    append: true\n    content: \"resources: {}\"\n"), true, "", "", false, "append: true adds the content to the image's own file: not honoured"},
		{"append, YAML 1.1", entry("    append: On\n    content: \"resources: {}\"\n"), true, "", "", false, "append: true adds"},
		{"append: false", entry("    append: false\n    content: \"resources: {driver: {version: '2.0.0'}}\"\n"), true, "2.0.0", "", false, ""},
		{"source", entry("    source: {uri: 'http://169.254.169.254/x'}\n"), true, "", "", false, "source: is fetched by cloud-init after boot, not read by /init"},
		{"an unknown encoding", entry("    encoding: zstd\n    content: x\n"), true, "", "", false, "user-data:3: write_files /etc/kpreload/instance.yaml: encoding \"zstd\": unknown"},
		{"not base64", entry("    encoding: b64\n    content: '%%%'\n"), true, "", "", false, "content: encoding b64: not base64"},
		{"not gzip", entry("    encoding: gz+b64\n    content: " + b64 + "\n"), true, "", "", false, "content: encoding gz+b64: not gzip"},
		{"a gzip bomb", entry("    encoding: gz+b64\n    content: " + bomb + "\n"), true, "", "", false, "more than 1048576 bytes uncompressed"},
		{"content a mapping", entry("    content: {resources: {}}\n"), true, "", "", false, "content: want a string, got a mapping"},
		{"encoding a list", entry("    encoding: [b64]\n"), true, "", "", false, "encoding: want a string"},
		{"content not YAML", entry("    content: |\n      resources: [\n"), true, "", "", false, "user-data:3: write_files /etc/kpreload/instance.yaml: content: yaml:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseUserData("user-data", []byte(tt.data))
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if tt.err != "" || gotErr != "" {
				if tt.err == "" || !strings.Contains(gotErr, tt.err) {
					t.Fatalf("err = %q, want it to contain %q", gotErr, tt.err)
				}
				if r.in != nil {
					t.Errorf("an instance came with the error: %+v", r.in)
				}
				return
			}
			if r.found != tt.found || r.legacy != tt.legacy {
				t.Fatalf("found %v legacy %v, want %v %v", r.found, r.legacy, tt.found, tt.legacy)
			}
			if !r.found {
				return
			}
			if got := r.in.Resources.Driver.Version; got != tt.version {
				t.Errorf("version %q, want %q", got, tt.version)
			}
			if tt.at != "" && r.at != tt.at {
				t.Errorf("version at %q, want %q", r.at, tt.at)
			}
		})
	}
}

// TestUserDataRequestDeprecated: a request under the kpreload: key carries
// the deprecation note, valid or not; the write_files entry does not.
func TestUserDataRequestDeprecated(t *testing.T) {
	for _, tt := range []struct {
		name, data string
		note       bool
	}{
		{"key", "#cloud-config\nkpreload:\n  resources: {}\n", true},
		{"key, wrong field", "#cloud-config\nkpreload:\n  resource: {}\n", true},
		{"write_files", "#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  content: \"resources: {}\"\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _, _ := UserDataRequest(SourceUserData, "cc.txt", []byte(tt.data))
			got := strings.Contains(strings.Join(req.Notes, "\n"), "user-data: "+DeprecatedKeyNote)
			if got != tt.note {
				t.Errorf("notes %q: deprecation note %v, want %v", req.Notes, got, tt.note)
			}
		})
	}
}
