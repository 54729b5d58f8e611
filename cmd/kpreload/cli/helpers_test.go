package cli

import "bytes"

// runCLI runs the kpreload command line and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Execute(args, &o, &e)
	return code, o.String(), e.String()
}
