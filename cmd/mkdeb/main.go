// Command mkdeb builds kpreload's Debian package (make deb): packaging/deb
// with the kpreload command tree, the programs make build and make plugin
// left in --bin, and the recipes.
//
//	mkdeb [--bin bin] [--recipes recipes] [--out out]
//
// The version is internal/version.Release; the maintainer is $DEBFULLNAME
// <$DEBEMAIL> as Debian's tools take it, else kpreload's; the date is
// $SOURCE_DATE_EPOCH (make deb sets the last commit's), else now.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/kpreload/kpreload/cmd/kpreload/cli"
	"github.com/kpreload/kpreload/internal/version"
	"github.com/kpreload/kpreload/packaging/deb"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Getenv); err != nil {
		fmt.Fprintf(os.Stderr, "mkdeb: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer, getenv func(string) string) error {
	fl := flag.NewFlagSet("mkdeb", flag.ContinueOnError)
	o := deb.Options{Root: cli.NewRoot(), Version: version.Release, Maintainer: deb.DefaultMaintainer}
	fl.StringVar(&o.BinDir, "bin", "bin", "directory of make build's and make plugin's programs")
	fl.StringVar(&o.RecipesDir, "recipes", "recipes", "recipes directory to ship")
	fl.StringVar(&o.OutDir, "out", "out", "output directory")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if name, mail := getenv("DEBFULLNAME"), getenv("DEBEMAIL"); name != "" && mail != "" {
		o.Maintainer = name + " <" + mail + ">"
	}
	o.Date = time.Now().UTC()
	if s := getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s)
		}
		o.Date = time.Unix(n, 0).UTC()
	}
	out, err := deb.Build(context.Background(), o)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, out)
	return nil
}
