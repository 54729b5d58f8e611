package clirun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/cdispec"
)

// EffectiveUID is the effective user the privilege checks ask about; a test sets it.
var EffectiveUID = os.Geteuid

// privilege says, for a command that changes the system, whether this run
// needs root: need is false when it does not; else why says what it
// changes ("it writes /boot and the module cache").
type privilege func(cmd *cobra.Command) (need bool, why string)

// privileges are the commands that need root for some or all of their runs,
// by command path. checkPrivilege asks before the command does any work, so
// an ordinary user gets one line instead of a "permission denied" half way.
var privileges = map[string]privilege{
	"kpreload install": func(cmd *cobra.Command) (bool, string) {
		if flagString(cmd, "image") != "" {
			return true, "it attaches and mounts the image"
		}
		root := flagString(cmd, "root")
		return !writable(filepath.Join(root, "boot")), "it writes " + filepath.Join(root, "boot") + " and the module cache"
	},
	"kpreload kernel-hook": func(*cobra.Command) (bool, string) {
		return true, "it writes /boot and the module cache"
	},
	"kpreload switch": func(cmd *cobra.Command) (bool, string) {
		return !flagBool(cmd, "dry-run"), "it unloads and loads kernel modules; --dry-run only takes the decision"
	},
	"kpreload cache verify": func(cmd *cobra.Command) (bool, string) {
		if !flagBool(cmd, "repair") && flagString(cmd, "rebuild") == "" {
			return false, "" // only reads
		}
		return cacheWriter(cmd)
	},
	"kpreload user-data apply": func(cmd *cobra.Command) (bool, string) {
		return !flagBool(cmd, "dry-run"), "it switches the driver and writes the module cache; --dry-run only takes the decision"
	},
	"kpreload k8s refresh": func(cmd *cobra.Command) (bool, string) {
		dir := filepath.Join(flagString(cmd, "root"), "etc", "kpreload", "k8s")
		return !writable(dir), "it writes " + dir
	},
	"kpreload copy-in": func(cmd *cobra.Command) (bool, string) {
		root := flagString(cmd, "root")
		return !writable(root), "it writes into " + root
	},
	"kpreload cache add":    cacheWriter,
	"kpreload cache rm":     cacheWriter,
	"kpreload cache index":  cacheWriter,
	"kpreload cache pull":   cacheWriter,
	"kpreload keys rotate":  cacheWriter,
	"kpreload cdi generate": outputWriter(""),
	"kpreload cdi refresh":  outputWriter(cdispec.DefaultSpecFile),
	"kpreload xorg":         outputWriter(""),
}

// cacheWriter is the privilege of a command that writes the --cache directory.
func cacheWriter(cmd *cobra.Command) (bool, string) {
	dir := flagString(cmd, "cache")
	return !writable(dir), "it writes the module cache " + dir
}

// outputWriter is the privilege of a command that writes its -o file (def
// when -o is not given; "" means stdout).
func outputWriter(def string) privilege {
	return func(cmd *cobra.Command) (bool, string) {
		out := def
		if f := cmd.Flags().Lookup("output"); f != nil && f.Changed {
			out = f.Value.String()
		}
		if out == "" || out == "-" {
			return false, ""
		}
		if f := cmd.Flags().Lookup("root"); f != nil && def != "" {
			out = filepath.Join(f.Value.String(), out)
		}
		return !writable(filepath.Dir(out)), "it writes " + out
	}
}

// checkPrivilege is the root's PersistentPreRunE: a command of privileges
// run by an ordinary user, where that run needs root, stops with one line.
func checkPrivilege(cmd *cobra.Command, _ []string) error {
	p := privileges[cmd.CommandPath()]
	if p == nil || EffectiveUID() == 0 {
		return nil
	}
	if need, why := p(cmd); need {
		return fmt.Errorf("%s needs root (%s): run it with sudo", strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), why)
	}
	return nil
}

// writable reports whether this process may create files in dir, or in its
// nearest existing ancestor when dir does not exist yet.
func writable(dir string) bool {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		err := unix.Access(p, unix.W_OK)
		if err == nil {
			return true
		}
		if !errors.Is(err, unix.ENOENT) || p == filepath.Dir(p) {
			return false
		}
	}
}

func flagString(cmd *cobra.Command, name string) string {
	if f := cmd.Flags().Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

func flagBool(cmd *cobra.Command, name string) bool {
	v, err := cmd.Flags().GetBool(name)
	return err == nil && v
}
