package instance_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/kpreload/kpreload/gpu/instance"
)

// fuzzName labels every fuzzed instance YAML; errors must name it.
const fuzzName = "fuzz.yaml"

// instanceSeeds are the repository's example instance YAMLs plus hand-made
// edge cases (every field, wrong types, syntax errors, aliases).
func instanceSeeds(tb testing.TB) [][]byte {
	files, err := filepath.Glob("../../images/instance-*.yaml")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no images/instance-*.yaml seeds (%v)", err)
	}
	var seeds [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	for _, s := range []string{
		"",
		"~\n",
		"---\n",
		"resources:\n",
		"resources:\n  gpu:\n    type: h200\n    count: 1\n  driver:\n    version: 535.261.03\n    cuda: 12.2\n    flavor: open\n",
		"resources:\n  driver:\n    version: latest\n    cuda: 12.7\n    cuda_compat: minor\n    flavor: proprietary\n",
		"resources:\n  driver:\n    version: 470\n    cuda: 11.0\n",
		"resources:\n  gpu:\n    type: 100\n    count: 0x10\n",
		"resources:\n  driver:\n    verison: 535\n",
		"resources:\n  gpu:\n    count: -2\n",
		"resources:\n  driver:\n    version: 1\n    version: 2\n",
		"resources: &a\n  driver: *a\n",
		"resources: [\n",
		"- a\n",
		"resources:\n\tdriver: {}\n",
		"resources:\n  driver: {version: \"535\"}\n---\nresources: {}\n",
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// lineRE is how every problem Parse finds in the document starts.
var lineRE = regexp.MustCompile(`^` + regexp.QuoteMeta(fuzzName) + `:[1-9][0-9]*: `)

// FuzzParse checks the instance YAML parser: no panic; an error and a result
// are never both returned; every problem of a document that is valid YAML is
// reported on its own line as "name:line: ..."; a YAML syntax error names the
// input; an accepted request holds only valid values and, written back as
// YAML, parses to the same request.
func FuzzParse(f *testing.F) {
	for _, s := range instanceSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := instance.Parse(fuzzName, data)
		if err != nil {
			if in != nil {
				t.Fatalf("Parse returned both %+v and error %v", in, err)
			}
			msg := err.Error()
			var node yaml.Node
			if yaml.Unmarshal(data, &node) != nil {
				if !strings.HasPrefix(msg, fuzzName+": ") {
					t.Fatalf("syntax error %q does not name the input", msg)
				}
				return
			}
			for _, l := range strings.Split(msg, "\n") {
				if !lineRE.MatchString(l) {
					t.Fatalf("error line %q does not start with %q:<line>:", l, fuzzName)
				}
			}
			return
		}
		if in == nil {
			t.Fatal("Parse returned neither a request nor an error")
		}
		checkInstance(t, in)
		// Written back as YAML (every value a string, the count an integer),
		// the request parses to the same value.
		d := in.Resources.Driver
		driver := map[string]string{}
		for k, v := range map[string]string{"version": d.Version, "cuda": d.CUDA, "cuda_compat": d.CUDACompat, "flavor": d.Flavor} {
			if v != "" {
				driver[k] = v
			}
		}
		gpu := map[string]any{"type": in.Resources.GPU.Type, "count": in.Resources.GPU.Count}
		if sh := in.Resources.GPU.Sharing; sh != nil {
			gpu["sharing"] = map[string]any{"strategy": sh.Strategy, "replicas": sh.Replicas}
		}
		if m := in.Resources.GPU.MIG; m != "" {
			gpu["mig"] = m
		}
		doc := map[string]any{"resources": map[string]any{
			"gpu":    gpu,
			"driver": driver,
		}}
		out, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatalf("yaml.Marshal(%+v): %v", doc, err)
		}
		again, err := instance.Parse(fuzzName, out)
		if err != nil {
			t.Fatalf("re-parse of %q (from %+v): %v", out, in, err)
		}
		if !reflect.DeepEqual(again, in) {
			t.Fatalf("round trip changed the request: %+v, then %+v from\n%s", in, again, out)
		}
	})
}

// checkInstance checks what every accepted request must satisfy.
func checkInstance(t *testing.T, in *instance.Instance) {
	t.Helper()
	d := in.Resources.Driver
	if err := instance.CheckVersion(d.WantVersion()); err != nil {
		t.Fatalf("accepted version %q: %v", d.Version, err)
	}
	switch d.WantFlavor() {
	case instance.FlavorAuto, instance.FlavorOpen, instance.FlavorProprietary:
	default:
		t.Fatalf("accepted flavour %q", d.Flavor)
	}
	if d.CUDA != "" {
		if _, err := instance.CUDAMinimum(d.CUDA, d.CUDACompat); err != nil {
			t.Fatalf("accepted cuda %q (compat %q): %v", d.CUDA, d.CUDACompat, err)
		}
	}
	if d.CUDACompat != "" && d.CUDACompat != instance.CUDACompatMinor {
		t.Fatalf("accepted cuda_compat %q", d.CUDACompat)
	}
	if in.Resources.GPU.Count < 0 {
		t.Fatalf("accepted count %d", in.Resources.GPU.Count)
	}
	if sh := in.Resources.GPU.Sharing; sh != nil {
		if (sh.Strategy != instance.SharingTimeSlicing && sh.Strategy != instance.SharingMPS) || sh.Replicas < 2 || sh.Replicas > instance.MaxReplicas {
			t.Fatalf("accepted sharing %+v", *sh)
		}
	}
	if m := in.Resources.GPU.MIG; m != "" {
		if err := instance.CheckMIG(m); err != nil {
			t.Fatalf("accepted mig %q: %v", m, err)
		}
	}
}

// FuzzFromCmdline checks the kernel command line delivery (kpreload.instance=
// <base64 YAML>, kpreload.driver=, kpreload.flavor=, as /init's command line
// parser hands them over): no panic; found exactly when a flag is present;
// errors say they come from the command line and name the flag; an accepted
// request is the base64 document's request with the driver and flavour flags
// applied, and the origin lists the flags used.
func FuzzFromCmdline(f *testing.F) {
	for _, s := range instanceSeeds(f) {
		f.Add(base64.StdEncoding.EncodeToString(s), true, "", false, "", false)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte("resources:\n  driver:\n    version: 470\n    cuda: 11.0\n"))
	f.Add(b64, true, "535", true, "open", true)
	f.Add(strings.TrimRight(b64, "="), true, "", false, "auto", true)
	f.Add(base64.URLEncoding.EncodeToString([]byte("resources: {driver: {flavor: open}}")), true, "1.0.0", true, "", false)
	f.Add("", false, "2.0.0", true, "", false)
	f.Add("", false, "latest", true, "proprietary", true)
	f.Add("", false, "newest", true, "closed", true)
	f.Add("!!", true, "", false, "", false)
	f.Add(" "+b64+"\n", true, "535.", true, "", false)
	f.Add("", false, "", false, "", false)
	f.Fuzz(func(t *testing.T, inst string, hasInst bool, driver string, hasDriver bool, flavor string, hasFlavor bool) {
		m := map[string]string{}
		if hasInst {
			m[instance.FlagInstance] = inst
		}
		if hasDriver {
			m[instance.FlagDriver] = driver
		}
		if hasFlavor {
			m[instance.FlagFlavor] = flavor
		}
		flag := func(n string) (string, bool) { v, ok := m[n]; return v, ok }
		in, origin, found, err := instance.FromCmdline(flag)
		if found != (len(m) > 0) {
			t.Fatalf("found = %v with flags %q", found, m)
		}
		if err != nil {
			if in != nil {
				t.Fatalf("FromCmdline returned both %+v and error %v", in, err)
			}
			if !strings.Contains(err.Error(), "kernel command line") {
				t.Fatalf("error %q does not say it comes from the kernel command line", err)
			}
			return
		}
		if !found {
			if in != nil || origin != "" {
				t.Fatalf("no flags, but request %+v from %q", in, origin)
			}
			return
		}
		if in == nil {
			t.Fatal("FromCmdline found flags but returned no request and no error")
		}
		checkInstance(t, in)
		want := &instance.Instance{}
		if hasInst {
			if !strings.Contains(origin, instance.FlagInstance) {
				t.Fatalf("origin %q does not name %s", origin, instance.FlagInstance)
			}
			var doc []byte
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
				if b, err := enc.DecodeString(strings.TrimSpace(inst)); err == nil {
					doc = b
					break
				}
			}
			if want, err = instance.Parse("kernel command line "+instance.FlagInstance, doc); err != nil {
				t.Fatalf("FromCmdline accepted %s=%q, whose document Parse refuses: %v", instance.FlagInstance, inst, err)
			}
		}
		if hasDriver {
			want.Resources.Driver.Version = driver
			if !strings.Contains(origin, instance.FlagDriver+"="+driver) {
				t.Fatalf("origin %q does not name %s=%s", origin, instance.FlagDriver, driver)
			}
		}
		if hasFlavor {
			want.Resources.Driver.Flavor = flavor
			if !strings.Contains(origin, instance.FlagFlavor+"="+flavor) {
				t.Fatalf("origin %q does not name %s=%s", origin, instance.FlagFlavor, flavor)
			}
		}
		if !reflect.DeepEqual(in, want) {
			t.Fatalf("FromCmdline(%q) = %+v, want %+v", m, in, want)
		}
	})
}

// FuzzFind checks the order of the sources (command line, then fw_cfg's
// opt/kpreload/instance.yaml, then the image's file, then the default) with a
// fuzzed command line flag and fuzzed fw_cfg and image files: no panic; the
// first source that parses wins and carries exactly what Parse makes of it;
// every source skipped for being invalid gives one error naming it.
func FuzzFind(f *testing.F) {
	seeds := instanceSeeds(f)
	for i, s := range seeds {
		f.Add("", false, s, true, seeds[(i+1)%len(seeds)], true)
	}
	f.Add("535", true, seeds[0], true, seeds[1], true)
	f.Add("newest", true, []byte("resources:\n  driver:\n    version: 2.0.0\n"), true, []byte{}, false)
	f.Add("", false, []byte("resources:\n  driver:\n    versoin: 1\n"), true, []byte("resources:\n  driver:\n    version: 535\n    flavor: open\n"), true)
	f.Add("", false, []byte{}, false, []byte("resources: [\n"), true)
	// One directory per fuzzing process, its files rewritten for every input.
	dir := f.TempDir()
	files := []instance.File{
		{Source: instance.SourceFwCfg, Path: filepath.Join(dir, "fw_cfg", "raw")},
		{Source: instance.SourceImage, Path: filepath.Join(dir, "instance.yaml")},
	}
	if err := os.MkdirAll(filepath.Dir(files[0].Path), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, driver string, hasDriver bool, fwcfg []byte, hasFwCfg bool, image []byte, hasImage bool) {
		contents := [][]byte{fwcfg, image}
		present := []bool{hasFwCfg, hasImage}
		for i, fl := range files {
			if !present[i] {
				if err := os.Remove(fl.Path); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				continue
			}
			if err := os.WriteFile(fl.Path, contents[i], 0o644); err != nil {
				t.Fatal(err)
			}
		}
		flag := func(n string) (string, bool) {
			if n == instance.FlagDriver && hasDriver {
				return driver, true
			}
			return "", false
		}
		req, errs := instance.Find(flag, files)
		wantErrs := 0
		if hasDriver {
			if instance.CheckVersion(driver) == nil {
				if req.Source != instance.SourceCmdline || req.Instance.Resources.Driver.Version != driver || len(errs) != 0 {
					t.Fatalf("valid %s=%q: got %+v, errors %v", instance.FlagDriver, driver, req, errs)
				}
				return
			}
			wantErrs++
		}
		for i, fl := range files {
			if !present[i] {
				continue
			}
			in, err := instance.Parse(fl.Path, contents[i])
			if err != nil {
				wantErrs++
				continue
			}
			if req.Source != fl.Source || req.Origin != fl.Path || !reflect.DeepEqual(req.Instance, *in) || len(errs) != wantErrs {
				t.Fatalf("want %s %+v from %s with %d errors, got %+v, errors %v", fl.Source, *in, fl.Path, wantErrs, req, errs)
			}
			return
		}
		if req.Source != instance.SourceDefault || req.Instance != (instance.Instance{}) || len(errs) != wantErrs {
			t.Fatalf("want the default with %d errors, got %+v, errors %v", wantErrs, req, errs)
		}
		for _, e := range errs {
			if !strings.Contains(e.Error(), "ignored") {
				t.Fatalf("error %q does not say the source was ignored", e)
			}
		}
	})
}

// FuzzParseUserData checks the reader of a seed's user-data (a disk anyone
// who launches the instance writes): no panic; an error names the file; a
// request is found only in a plain #cloud-config document, and the same
// request under kpreload: as instance.Parse reads on its own.
func FuzzParseUserData(f *testing.F) {
	for _, s := range []string{
		"#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"2.0.0\"\n",
		"#cloud-config\nusers: [default]\n", "Content-Type: multipart/mixed\n", "#cloud-config\nkpreload: [\n",
		"#cloud-config\nkpreload:\n  resources: {gpu: {count: 2, type: h100}}\n", "", "#cloud-config",
		"#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  content: |\n    resources:\n      driver:\n        version: \"2.0.0\"\n",
		"#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  encoding: gz+b64\n  content: H4sIAAAAAAAA/ypKLS7NKy1KTQEAAAD//wMAAAD//w==\n",
		"#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  encoding: gzip\n  content: !!binary H4sIAAAAAAAA/w==\n",
		"#cloud-config\nwrite_files:\n- {path: /etc/kpreload/instance.yaml, encoding: b64, content: cmVzb3VyY2VzOiB7fQo=}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, found, err := instance.ParseUserData("user-data", data)
		if err != nil {
			if in != nil || !strings.HasPrefix(err.Error(), "user-data") {
				t.Fatalf("ParseUserData = %+v, %v: want no instance and an error naming the file", in, err)
			}
			return
		}
		if found != (in != nil) {
			t.Fatalf("found %v with instance %+v", found, in)
		}
		if found && !strings.HasPrefix(strings.TrimPrefix(string(data), "\xef\xbb\xbf"), "#cloud-config") {
			t.Fatalf("a request found in user-data that is not #cloud-config: %q", data)
		}
	})
}
