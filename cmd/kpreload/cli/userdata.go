package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/gpu/switcher"
	"github.com/kpreload/kpreload/gpu/userdata"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/live/loader"
	"github.com/kpreload/kpreload/report"
)

func init() { register(newUserDataCmd) }

// CloudConfigPath is where cloud-init keeps the #cloud-config it assembled
// from the instance's user-data.
const CloudConfigPath = userdata.CloudConfigPath

func newUserDataCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user-data",
		Short: "Apply the driver request in cloud-init's user-data after boot",
	}
	var (
		cloudConfig, cacheDir string
		asJSON                bool
	)
	apply := &cobra.Command{
		Use:   "apply [--cloud-config FILE] [--cache DIR] [--json]",
		Short: "Switch to the driver version the user-data asks for, when /init could not read it",
		Long: `apply reads the instance request in the #cloud-config cloud-init assembled
from the instance's user-data (` + CloudConfigPath + `): the content of its
write_files entry for /etc/kpreload/instance.yaml, or (deprecated: cloud-init
23.4 and later reject it in their schema check) a top-level kpreload: key, in
the schema of /etc/kpreload/instance.yaml. /init reads the user-data of a
seed disk itself (NoCloud, ConfigDrive) when it is a plain #cloud-config; this
covers what only cloud-init can read: user-data from a cloud's metadata
service, or a MIME multipart archive. kpreload-user-data.service runs it after
cloud-init's network stage and before the persistence daemon and container
runtimes.

Precedence: a request /init took from the kernel command line, fw_cfg or a seed
stands; otherwise the user-data's request replaces the image's file and the
default. It takes the driver decision /init takes over the root's cache and, when
it picks another version than the active one, switches to it (kpreload switch)
and refreshes the CDI spec. What it did goes into the boot report's user_data
section. A request with a wrong field is an error naming the file and line; the
driver /init loaded stays.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rec, err := applyUserData(cmd.ErrOrStderr(), cloudConfig, cacheDir)
			if rerr := recordSection("/", report.Path, "user_data", rec); rerr != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "kpreload user-data: warning: %v\n", rerr)
			}
			if asJSON {
				if jerr := printJSON(cmd.OutOrStdout(), rec); jerr != nil {
					return jerr
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "kpreload user-data: %s: %s\n", rec.Action, rec.Reason)
			}
			return err
		},
	}
	f := apply.Flags()
	f.StringVar(&cloudConfig, "cloud-config", CloudConfigPath, "the #cloud-config cloud-init assembled from the user-data")
	f.StringVar(&cacheDir, "cache", store.DefaultDir, "module cache holding the driver sets")
	f.BoolVar(&asJSON, "json", false, "print what was done as JSON (the report's user_data section)")
	cmd.AddCommand(apply)
	return cmd
}

// applyUserData runs gpu/userdata over this machine; log receives the
// switch's steps.
func applyUserData(log io.Writer, cloudConfig, cacheDir string) (*report.UserData, error) {
	return userdata.Apply(userdata.Options{
		CloudConfig: cloudConfig, CacheDir: cacheDir,
		Root: "/", ReportPath: report.Path,
		SysDir: "/sys", ProcDir: "/proc", DevDir: "/dev", RunDir: activate.RunDir,
		DriversDir: activate.DriversDir,
		System:     userDataSystem{},
		Log:        prefixWriter{w: log, prefix: "kpreload user-data: "},
		Now:        time.Now,
	})
}

// userDataSystem is the running system: uname, the real kernel, ldconfig
// and the CDI spec under /.
type userDataSystem struct{}

func (userDataSystem) Release() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

func (userDataSystem) Switch(o switcher.Options) (*switcher.Result, error) {
	o.Kernel = switcher.System{Loader: &loader.Loader{Release: o.Machine.Kernel, SysRoot: o.SysDir, VerifyDigest: true, Phase: "switch", Now: switcher.BootTime}}
	o.Ldconfig = ldconfig
	return switcher.Switch(o)
}

func (userDataSystem) RefreshCDI() error {
	_, err := refreshCDI("/", "", cdispec.Options{})
	return err
}
