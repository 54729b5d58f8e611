package clirun

import "github.com/spf13/cobra"

// extraExamples are the Examples of the root and of the commands whose
// constructors cobra owns (help, completion); every other command has its
// own, from its group's package. cli's TestCommandTree checks that every
// command has Examples, TestEveryExampleHasItsTest which test runs each.
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
