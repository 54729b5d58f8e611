package boottest

import "fmt"

// StepScript is where an image built for a boot test keeps the script its
// test step runs, and StepService the unit that runs it once the drivers
// are ready; StepUnit returns that unit's text.
const (
	StepScript  = "/usr/local/sbin/kpreload-test-step"
	StepService = "kpreload-test-step.service"
)

// StepUnit returns the systemd unit that runs StepScript once after
// kpreload-drivers.target, its output on the console, described as what.
func StepUnit(what string) string {
	return fmt.Sprintf(`[Unit]
Description=%s
After=kpreload-drivers.target

[Service]
Type=oneshot
ExecStart=%s
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
`, what, StepScript)
}
