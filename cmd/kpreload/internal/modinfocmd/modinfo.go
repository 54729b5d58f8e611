// Package modinfocmd is kpreload modinfo: what a module file says of itself
// (kmodcache/modinfo).
package modinfocmd

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
)

// New builds `kpreload modinfo`, a reader of module files in the
// spirit of kmod's modinfo that also understands .ko.zst and .ko.gz.
func New() *cobra.Command {
	var (
		asJSON bool
		field  string
	)
	cmd := &cobra.Command{
		Use:         "modinfo FILE...",
		Annotations: map[string]string{mistakes.ArgsNote: "the module files to read"},
		Short:       "Show what kernel module files (.ko, .ko.xz, .ko.zst, .ko.gz) say about themselves",
		Long: `Show the .modinfo fields, the modversions table size, the compression and
whether a signature is appended, for each kernel module file given.

With -F, print only the values of one field, one per line, as modinfo -F does;
besides the .modinfo keys, -F knows filename, signed, compression and versions
(the modversions table as "0xCRC<TAB>symbol" lines, like
modprobe --dump-modversions). With --json, print the parsed module (one object
for one file, an array for several).`,
		Example: `  kpreload modinfo testdriver.ko`,
		Args:    mistakes.MinArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON && field != "" {
				return errors.New("modinfo: --json and -F cannot be combined")
			}
			var infos []*modinfo.Info
			var errs []error
			for _, file := range args {
				info, err := modinfo.ReadFile(file)
				if err != nil {
					errs = append(errs, fmt.Errorf("modinfo: %w", err))
					continue
				}
				infos = append(infos, info)
			}
			w := cmd.OutOrStdout()
			var err error
			switch {
			case asJSON && len(args) == 1:
				if len(infos) == 1 {
					err = cmdout.PrintJSON(w, infos[0])
				}
			case asJSON:
				if infos == nil {
					infos = []*modinfo.Info{}
				}
				err = cmdout.PrintJSON(w, infos)
			case field != "":
				for _, info := range infos {
					if err = printField(w, info, field); err != nil {
						break
					}
				}
			default:
				for _, info := range infos {
					if err = printModinfo(w, info); err != nil {
						break
					}
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("modinfo: write output: %w", err))
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the parsed module(s) as JSON")
	cmd.Flags().StringVarP(&field, "field", "F", "", "print only this field's values, one per line")
	return cmd
}

// printModinfo writes info as kmod's modinfo does ("key:" padded to 16
// columns, keys in file order, parameters last), followed by what kmod does
// not say: signed, compression and the size of the modversions table.
func printModinfo(w io.Writer, info *modinfo.Info) error {
	var b strings.Builder
	line := func(key, value string) { fmt.Fprintf(&b, "%-16s%s\n", key+":", value) }
	line("filename", info.File)
	for _, key := range info.Keys {
		if key == "parm" || key == "parmtype" {
			continue
		}
		for _, v := range info.Fields[key] {
			line(key, v)
		}
	}
	for _, p := range params(info) {
		line("parm", p)
	}
	line("signed", yesNo(info.Signed))
	compression := info.Compression
	if compression == modinfo.CompressionNone {
		compression = "none"
	}
	line("compression", compression)
	line("versions", fmt.Sprintf("%d symbols", len(info.Versions)))
	_, err := io.WriteString(w, b.String())
	return err
}

// printField writes the values of one field of info, one per line, as
// `modinfo -F field` does; an absent field prints nothing.
func printField(w io.Writer, info *modinfo.Info, field string) error {
	var vals []string
	switch field {
	case "filename":
		vals = []string{info.File}
	case "signed":
		vals = []string{yesNo(info.Signed)}
	case "compression":
		vals = []string{info.Compression}
	case "versions":
		for _, s := range info.Versions {
			vals = append(vals, fmt.Sprintf("0x%08x\t%s", s.CRC, s.Name))
		}
	case "parm":
		vals = params(info)
	default:
		vals = info.Fields[field]
	}
	var b strings.Builder
	for _, v := range vals {
		b.WriteString(v)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// params merges the "parm=name:description" and "parmtype=name:type" entries
// of info into kmod's "name:description (type)" lines, ordered by each
// parameter's first mention (reading the values of Keys in order).
func params(info *modinfo.Info) []string {
	type param struct{ desc, typ string }
	var order []string
	byName := map[string]*param{}
	get := func(entry string) (*param, string) {
		name, rest, _ := strings.Cut(entry, ":")
		p, ok := byName[name]
		if !ok {
			p = &param{}
			byName[name] = p
			order = append(order, name)
		}
		return p, rest
	}
	for _, key := range info.Keys {
		for _, v := range info.Fields[key] {
			switch key {
			case "parm":
				p, desc := get(v)
				p.desc = desc
			case "parmtype":
				p, typ := get(v)
				p.typ = typ
			}
		}
	}
	out := make([]string, 0, len(order))
	for _, name := range order {
		p := byName[name]
		s := name + ":" + p.desc
		if p.typ != "" {
			s += " (" + p.typ + ")"
		}
		out = append(out, s)
	}
	return out
}

// yesNo spells a boolean for human output.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
