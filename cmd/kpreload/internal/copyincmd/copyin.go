// Package copyincmd is kpreload copy-in: files copied into a root confined to
// it (internal/inroot), for a provisioner's staging.
package copyincmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/internal/inroot"
)

// New builds kpreload copy-in.
func New() *cobra.Command {
	var root string
	c := &cobra.Command{
		Use:         "copy-in --root DIR TREE",
		Annotations: map[string]string{mistakes.ArgsNote: "the tree to copy into the root"},
		Short:       "Copy a directory tree into a root, every path resolved inside the root",
		Long: `Copy the directory tree TREE (unpacked kpreload files, as the Packer
provisioner uploads them) into the root filesystem DIR. Every path is resolved
inside DIR as in a chroot of it: a link in DIR, absolute or with "..", is
followed inside DIR or the copy fails naming it; nothing outside DIR is created,
changed or removed. Directories already there are kept; files are replaced
atomically with TREE's modes; links are made anew.`,
		Example: `  sudo kpreload copy-in --root ./rootfs ./tree`,
		Args:    mistakes.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := inroot.CopyTree(root, "/", args[0]); err != nil {
				return fmt.Errorf("copy %s into %s: %w", args[0], root, err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&root, "root", "", "the root filesystem to copy into (required)")
	_ = c.MarkFlagRequired("root")
	return c
}
