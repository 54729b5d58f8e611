package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/gpu/switcher"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/live/loader"
	"github.com/kpreload/kpreload/live/report"
	"github.com/kpreload/kpreload/live/secureboot"
)

func init() { register(newUserDataCmd) }

// CloudConfigPath is where cloud-init keeps the #cloud-config it assembled
// from the instance's user-data (every part of a MIME multipart archive).
const CloudConfigPath = "/var/lib/cloud/instance/cloud-config.txt"

// requestWins are the request sources /init reads that a request in
// user-data does not override: they were given for this boot explicitly,
// or are the same user-data, read by /init from its seed.
var requestWins = []string{instance.SourceCmdline, instance.SourceFwCfg, instance.SourceSeed}

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
		Short: "Switch to the driver version the user-data's kpreload: key asks for, when /init could not read it",
		Long: `apply reads the instance request under the kpreload: key of the #cloud-config
cloud-init assembled from the instance's user-data (` + CloudConfigPath + `):
the same schema as /etc/kpreload/instance.yaml. /init reads the user-data of a
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
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := applyUserData(cmd.ErrOrStderr(), cloudConfig, cacheDir)
			if rerr := recordSection("/", report.Path, "user_data", out.rec); rerr != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "kpreload user-data: warning: %v\n", rerr)
			}
			if asJSON {
				if err := printJSON(cmd.OutOrStdout(), out.rec); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "kpreload user-data: %s: %s\n", out.rec.Action, out.rec.Reason)
			}
			return out.err
		},
	}
	f := apply.Flags()
	f.StringVar(&cloudConfig, "cloud-config", CloudConfigPath, "the #cloud-config cloud-init assembled from the user-data")
	f.StringVar(&cacheDir, "cache", store.DefaultDir, "module cache holding the driver sets")
	f.BoolVar(&asJSON, "json", false, "print what was done as JSON (the report's user_data section)")
	cmd.AddCommand(apply)
	return cmd
}

type userDataOutcome struct {
	rec *report.UserData
	err error
}

// applyUserData does apply's work; log receives the switch's steps.
func applyUserData(log io.Writer, cloudConfig, cacheDir string) userDataOutcome {
	rec := &report.UserData{Origin: cloudConfig, Action: "none", Time: time.Now().UTC().Format(time.RFC3339)}
	done := func(action, reason string, err error) userDataOutcome {
		rec.Action, rec.Reason = action, reason
		return userDataOutcome{rec, err}
	}
	data, err := inroot.ReadPath(cloudConfig, instance.MaxUserData)
	if errors.Is(err, fs.ErrNotExist) {
		return done("none", "cloud-init left no cloud-config: no request", nil)
	}
	if err != nil {
		return done("failed", err.Error(), err)
	}
	req, found, err := instance.UserDataRequest(instance.SourceUserData, cloudConfig, data)
	if err != nil {
		return done("failed", "the request is not honoured: "+err.Error(), err)
	}
	if !found {
		return done("none", "the user-data has no "+instance.UserDataKey+": key", nil)
	}
	var rep report.Report
	if b, err := inroot.ReadFile("/", report.Path, inroot.MaxLarge); err == nil {
		if err := json.Unmarshal(b, &rep); err != nil {
			return done("failed", fmt.Sprintf("boot report %s: %v", report.Path, err), err)
		}
	}
	if s := rep.Selection; s != nil && slices.Contains(requestWins, s.Source) {
		return done("none", fmt.Sprintf("/init took the request from %s (%s), which the user-data does not override", s.Source, s.Origin), nil)
	}

	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return done("failed", err.Error(), err)
	}
	kernel := unix.ByteSliceToString(u.Release[:])
	idxPath := bootindex.Path(cacheDir, kernel)
	idx, err := bootindex.Read(idxPath)
	if err != nil {
		return done("failed", err.Error(), err)
	}
	devs, err := pci.ScanIn("/sys")
	if err != nil {
		return done("failed", err.Error(), err)
	}
	sig := secureboot.Read("/sys", "/proc", "")
	dec := selection.Input{Kernel: kernel, Vermagic: selection.KernelVermagic(idx), Request: req, Devices: devs, Signatures: &sig}
	for i := range idx.Sets {
		dec.Sets = append(dec.Sets, selection.Set{Set: &idx.Sets[i], Dir: filepath.Dir(idxPath), From: cacheDir})
	}
	d := selection.Decide(dec)
	var want *report.SelectionDriver
	for i := range d.Drivers {
		if dd := &d.Drivers[i]; dd.Requested && (want == nil || selection.IsNVIDIA(dd.Driver)) {
			want = dd
		}
	}
	if want == nil {
		return done("none", "the cache holds no driver the request applies to", nil)
	}
	rec.Driver = want.Driver
	if want.Chosen == nil {
		err := errors.New(want.Refusal)
		return done("failed", want.Refusal, err)
	}
	rec.To = want.Chosen.Version
	// A version the image lacks goes on with the default, as at boot: say so.
	fault := ""
	if want.Fallback != "" {
		fault = want.Fallback + "; "
	}
	if ready, err := activate.ReadReady(activate.RunDir); err == nil && ready.Driver == want.Driver {
		rec.From = ready.Version
		if ready.Set == want.Chosen.ID {
			return done("unchanged", fmt.Sprintf("%s%s %s, which the user-data asks for, is active", fault, want.Driver, ready.Version), nil)
		}
	}
	ld := &loader.Loader{Release: kernel, SysRoot: "/sys", VerifyDigest: true, Phase: "switch", Now: switcher.BootTime}
	res, err := switcher.Switch(switcher.Options{
		Version: want.Chosen.Version, Driver: want.Driver, Flavor: want.Chosen.Flavor,
		CacheDir: cacheDir, Release: kernel,
		SysDir: "/sys", ProcDir: "/proc", DevDir: "/dev", RunDir: activate.RunDir, Root: "/",
		Request: req, DriversDir: activate.DriversDir,
		Kernel: switcher.System{Loader: ld}, BindTimeout: 10 * time.Second, Ldconfig: ldconfig,
		Log: prefixWriter{w: log, prefix: "kpreload user-data: "},
	})
	if _, cerr := refreshCDI("/", "", cdispec.Options{}); cerr != nil {
		fmt.Fprintf(log, "kpreload user-data: warning: %v\n", cerr)
	}
	if err != nil {
		return done("failed", err.Error(), err)
	}
	if res.Unchanged {
		return done("unchanged", fmt.Sprintf("%s%s %s is active", fault, want.Driver, want.Chosen.Version), nil)
	}
	if res.From != nil {
		rec.From = res.From.Version
	}
	return done("switched", fmt.Sprintf("%sthe user-data asks for %s (%s); /init had taken the request from %s", fault, want.Chosen.Version, want.Rule, sourceOf(rep.Selection)), nil)
}

// sourceOf names a boot decision's request source.
func sourceOf(s *report.Selection) string {
	if s == nil {
		return "nowhere (no driver decision at boot)"
	}
	return s.Source
}
