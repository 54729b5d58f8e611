package image

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestCloudInitProblems: what TestCloudInitImage calls a clean cloud-init
// verdict, on cloud-init's own outputs (22.4's and 25.1's --long).
func TestCloudInitProblems(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	const done251 = "status: done\nextended_status: done\nboot_status_code: enabled-by-generator\ndetail: DataSourceNoCloud [seed=/dev/vdb]\nerrors: []\nrecoverable_errors: {}\n"
	for _, tt := range []struct {
		name, rc, status, console string
		want                      string // in the problems, "" for none
	}{
		{"22.4 done", "0", "status: done\ntime: Mon, 07 Dec 2026 01:00:00 +0000\ndetail:\nDataSourceNoCloud [seed=/dev/vdb][dsmode=net]\n", "", ""},
		{"25.1 done", "0", done251, "Cloud-init v. 25.1.4 finished at", ""},
		{"25.1 degraded", "2", "status: done\nextended_status: degraded done\nerrors: []\nrecoverable_errors:\nWARNING:\n\t- cloud-config failed schema validation!\n", "", "exited 2"},
		{"errors listed", "1", "status: error\nerrors:\n\t- x\n", "", "status is not done"},
		{"schema warning on the console", "0", done251, "schema.py[WARNING]: cloud-config failed schema validation!", "console: failed schema validation"},
		{"no ip", "0", done251, "netinfo.py[WARNING]: Could not print networks: missing 'ip' and 'ifconfig' commands", "console: Could not print networks"},
		{"still running", "0", "status: running\n", "", "status is not done"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, got := cloudInitProblems(map[string]string{"cloud-init-rc": tt.rc, "cloud-init-status": b64(tt.status)}, tt.console)
			s := strings.Join(got, "\n")
			if (tt.want == "") != (s == "") || !strings.Contains(s, tt.want) {
				t.Errorf("problems %q, want %q", got, tt.want)
			}
		})
	}
}
