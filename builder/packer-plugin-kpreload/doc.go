// Package plugin is the root of kpreload's Packer plugin, the folder
// packer-sdc takes for a plugin's own (its name begins with packer-plugin-):
// the builder (kpreloadbuilder), the provisioner, their shared configuration
// (internal/pkrcfg), the version Packer sees, and under docs-partials/ the
// field docs `go generate ./...` writes from the configuration structs'
// comments, beside the HCL2 specs (*.hcl2spec.go). Its test checks that what
// is checked in is what the generator writes. The plugin's command is
// cmd/packer-plugin-kpreload.
package plugin
