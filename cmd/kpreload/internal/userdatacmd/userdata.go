// Package userdatacmd is kpreload user-data apply: the driver a cloud-config
// asks for applied at first boot (gpu/userdata), the outcome recorded in the
// boot report.
package userdatacmd

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cdicmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/gpu/switcher"
	"github.com/kpreload/kpreload/gpu/userdata"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/report"
)

// CloudConfigPath is where cloud-init keeps the #cloud-config it assembled
// from the instance's user-data.
const CloudConfigPath = userdata.CloudConfigPath

// New builds kpreload user-data and user-data apply.
func New() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "user-data",
		Short:   "Apply the driver request in cloud-init's user-data after boot",
		Example: `  kpreload user-data apply --dry-run --cloud-config images/user-data-550.yaml --sysfs testdata/h200-gpu-vm --cache testdata/plan-bundle --kernel 6.1.0-56-cloud-amd64`,
	}
	cmd.AddCommand((&userDataApplyCommand{}).build())
	return cmd
}

// userDataApplyCommand is kpreload user-data apply: its options, as the
// flags set them.
type userDataApplyCommand struct {
	cloudConfig, cacheDir, sysfs, kernel string
	asJSON, dryRun                       bool
}

// build makes the command: its help and its flags.
func (m *userDataApplyCommand) build() *cobra.Command {

	apply := &cobra.Command{
		Use:   "apply [--cloud-config FILE] [--cache DIR] [--json] | apply --dry-run [--cloud-config FILE] [--sysfs ROOT] [--cache DIR] [--kernel KVER] [--json]",
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
driver /init loaded stays.

--dry-run takes the same decision and says what apply would do (would-switch
where it would switch), changing and recording nothing; with --sysfs (a sysfs
mount, a root holding sys/, or a capture, as kpreload plan reads) it decides
for that machine's devices and --kernel instead of this one's, without its
boot report.`,
		Example: `  kpreload user-data apply --dry-run --cloud-config images/user-data-550.yaml --sysfs testdata/h200-gpu-vm --cache testdata/plan-bundle --kernel 6.1.0-56-cloud-amd64
  kpreload user-data apply --dry-run --cloud-config images/user-data-550.yaml --sysfs testdata/h100-gpu-vm/pci-sysfs.txt --cache testdata/plan-bundle --kernel 6.1.0-56-cloud-amd64 --json`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := m.validate(); err != nil {
				return err
			}
			return m.run(cmd)
		},
	}
	f := apply.Flags()

	f.StringVar(&m.cloudConfig, "cloud-config", CloudConfigPath, "the #cloud-config cloud-init assembled from the user-data")
	f.StringVar(&m.cacheDir, "cache", store.DefaultDir, "module cache holding the driver sets")
	f.BoolVar(&m.asJSON, "json", false, "print what was done as JSON (the report's user_data section)")
	f.BoolVar(&m.dryRun, "dry-run", false, "take the decision and say what apply would do, changing and recording nothing")
	f.StringVar(&m.sysfs, "sysfs", "", "with --dry-run: the PCI devices of another machine (a sysfs mount, a root holding sys/, a capture file or directory)")
	f.StringVar(&m.kernel, "kernel", "", "with --dry-run: the kernel release to decide for (default: this machine's)")
	return apply
}

// validate checks the flags: another machine's devices and kernel go
// with --dry-run only.
func (m *userDataApplyCommand) validate() error {
	if (m.sysfs != "" || m.kernel != "") && !m.dryRun {
		return errors.New("user-data apply: --sysfs and --kernel decide for another machine: only with --dry-run")
	}
	if err := mistakes.CheckNames("--kernel", m.kernel); err != nil {
		return fmt.Errorf("user-data apply: %w", err)
	}
	return nil
}

// run applies the request (with --dry-run: takes the decision only),
// records what it did in the boot report and says it.
func (m *userDataApplyCommand) run(cmd *cobra.Command) error {
	o := userDataOptions(cmd.ErrOrStderr(), m.cloudConfig, m.cacheDir)
	if m.dryRun {
		o.DryRun, o.Log = true, io.Discard
		if m.kernel != "" {
			o.System = userDataSystem{release: m.kernel}
		}
		if m.sysfs != "" {
			o.SysDir, o.ProcDir, o.RunDir, o.ReportPath = m.sysfs, "", "", "" // another machine: none of this host's records
		}
	}
	rec, err := userdata.Apply(o)
	if !m.dryRun {
		if rerr := cdicmd.RecordSection("/", report.Path, "user_data", rec); rerr != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "kpreload user-data: warning: %v\n", rerr)
		}
	}
	if m.asJSON {
		if jerr := cmdout.PrintJSON(cmd.OutOrStdout(), rec); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprintf(cmd.OutOrStdout(), "kpreload user-data: %s: %s\n", rec.Action, rec.Reason)
	}
	return err
}

// userDataOptions are gpu/userdata's options over this machine; log
// receives the switch's steps.
func userDataOptions(log io.Writer, cloudConfig, cacheDir string) userdata.Options {
	return userdata.Options{
		CloudConfig: cloudConfig, CacheDir: cacheDir,
		Root: "/", ReportPath: report.Path,
		SysDir: "/sys", ProcDir: "/proc", DevDir: "/dev", RunDir: activate.RunDir,
		DriversDir: activate.DriversDir,
		System:     userDataSystem{},
		Log:        cmdout.Prefixed(log, "kpreload user-data: "),
		Now:        time.Now,
	}
}

// userDataSystem is the running system: uname (or release, when set), the
// real kernel, ldconfig and the CDI spec under /.
type userDataSystem struct{ release string }

func (s userDataSystem) Release() (string, error) {
	if s.release != "" {
		return s.release, nil
	}
	return switcher.System{}.Release()
}

func (userDataSystem) Switch(o switcher.Options) (*switcher.Result, error) {
	sys := switcher.NewSystem(o.Machine.Kernel, o.SysDir)
	o.Kernel, o.Ldconfig = sys, sys.Ldconfig
	return switcher.Switch(o)
}

func (userDataSystem) RefreshCDI() error {
	_, err := cdicmd.Refresh("/", "", cdispec.Options{})
	return err
}
