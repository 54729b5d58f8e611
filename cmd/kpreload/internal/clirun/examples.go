package clirun

import "github.com/spf13/cobra"

// extraExamples are the Examples of the commands whose constructors cobra
// owns (help, completion), of the groups (their children's most common use:
// each line is one of a child's own examples), and of commands whose
// constructor has none. cli's TestCommandTree checks that every command has
// Examples and which test runs each.
var extraExamples = map[string]string{
	"kpreload": `  kpreload recipe supported-gpus nvidia-550 --recipes recipes
  kpreload keys show --cache cache
  kpreload cache ls --cache ./cache`,
	"kpreload help":                  `  kpreload help switch`,
	"kpreload completion":            `  kpreload completion bash`,
	"kpreload completion bash":       `  kpreload completion bash`,
	"kpreload completion zsh":        `  kpreload completion zsh`,
	"kpreload completion fish":       `  kpreload completion fish`,
	"kpreload completion powershell": `  kpreload completion powershell`,
	"kpreload cache":                 `  kpreload cache ls --cache ./cache`,
	"kpreload cdi":                   `  kpreload cdi refresh --json`,
	"kpreload cdi hook":              `  kpreload cdi hook update-ldcache --container-root ./rootfs --folder /usr/local/nvidia/lib64`,
	"kpreload image":                 `  kpreload image build --name ci --kernel 6.1.0-56-cloud-amd64 --recipe testdriver --build-missing --out out/images --dry-run`,
	"kpreload keys":                  `  kpreload keys show --cache cache`,
	"kpreload recipe":                `  kpreload recipe supported-gpus nvidia-550 --recipes recipes`,
	"kpreload k8s":                   `  kpreload k8s refresh --root ./root --report report.json`,
	"kpreload kernels":               `  kpreload kernels fetch 6.1.0-56-cloud-amd64`,
	"kpreload user-data":             `  kpreload user-data apply --dry-run --cloud-config images/user-data-550.yaml --sysfs testdata/h200-gpu-vm --cache testdata/plan-bundle --kernel 6.1.0-56-cloud-amd64`,
	"kpreload k8s refresh":           `  kpreload k8s refresh --root ./root --report report.json`,
	"kpreload kernels fetch":         `  kpreload kernels fetch 6.1.0-56-cloud-amd64`,
	"kpreload build":                 `  kpreload build testdriver --kernel 6.1.0-56-cloud-amd64 --cache ./cache`,
	"kpreload cache add":             `  sudo kpreload cache add --driver testdriver --version 1.0 testdriver.ko`,
	"kpreload cache index":           `  kpreload cache index --cache ./cache --kernel 6.1.0-56-cloud-amd64`,
	"kpreload cache ls":              `  kpreload cache ls --cache ./cache`,
	"kpreload cache verify":          `  kpreload cache verify --cache ./cache --repair`,
	"kpreload cache push":            `  kpreload cache push --cache ./cache --remote oci://127.0.0.1:5055/team --plain-http --sign team.key`,
	"kpreload cache pull":            `  kpreload cache pull --cache ./cache --remote oci://127.0.0.1:5055/team --plain-http --trust team.pub`,
	"kpreload modinfo":               `  kpreload modinfo testdriver.ko`,
}

// addExamples gives each command of extraExamples that has none its Examples.
func addExamples(root *cobra.Command) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if ex, ok := extraExamples[c.CommandPath()]; ok && c.Example == "" {
			c.Example = ex
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}
