package modinfo

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// testModules are modules present in both test kernels, picked for what their
// .modinfo holds: firmware (ni_pcidio), many depends (raid456), softdep
// (xt_LOG), version and srcversion (vsock, tipc), many aliases (mlx5_core),
// empty depends (crc7, and virtio_blk on 6.12), a large module (btrfs).
var testModules = []string{
	"kernel/drivers/block/virtio_blk",
	"kernel/drivers/comedi/drivers/ni_pcidio",
	"kernel/drivers/md/raid456",
	"kernel/net/netfilter/xt_LOG",
	"kernel/net/vmw_vsock/vsock",
	"kernel/net/tipc/tipc",
	"kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core",
	"kernel/drivers/net/ethernet/amazon/ena/ena",
	"kernel/drivers/nvme/host/nvme-tcp",
	"kernel/lib/crc7",
	"kernel/fs/btrfs/btrfs",
}

// compressionByExt is the compression a Debian module file's extension implies.
func compressionByExt(file string) string {
	switch filepath.Ext(file) {
	case ".xz":
		return CompressionXZ
	case ".zst":
		return CompressionZstd
	case ".gz":
		return CompressionGzip
	}
	return CompressionNone
}

func TestReadFileMatchesKmod(t *testing.T) {
	for _, kver := range testKernels() {
		// What the chosen modules must exercise, so that the comparison
		// cannot pass on empty fields.
		var seen struct{ firmware, softdep, version, srcversion, depends, noDepends, aliases, versions bool }
		for _, stem := range testModules {
			file := findModule(t, kver, stem)
			t.Run(kver+"/"+filepath.Base(stem), func(t *testing.T) {
				info, err := ReadFile(file)
				if err != nil {
					t.Fatalf("ReadFile(%q) error: %v", file, err)
				}
				if info.File != file {
					t.Errorf("ReadFile(%q) File = %q", file, info.File)
				}
				if want := compressionByExt(file); info.Compression != want {
					t.Errorf("ReadFile(%q) Compression = %q, want %q", file, info.Compression, want)
				}
				image := decompressCLI(t, file)
				if info.Size != int64(len(image)) {
					t.Errorf("ReadFile(%q) Size = %d, want %d", file, info.Size, len(image))
				}
				checkAgainstKmod(t, file, info)
				seen.firmware = seen.firmware || len(info.Firmware) > 0
				seen.softdep = seen.softdep || len(info.Softdeps) > 0
				seen.version = seen.version || info.Version != ""
				seen.srcversion = seen.srcversion || info.Srcversion != ""
				seen.depends = seen.depends || len(info.Depends) > 1
				seen.noDepends = seen.noDepends || (info.Depends == nil && slices.Equal(info.Fields["depends"], []string{""}))
				seen.aliases = seen.aliases || len(info.Aliases) > 10
				seen.versions = seen.versions || len(info.Versions) > 50
			})
		}
		if !(seen.firmware && seen.softdep && seen.version && seen.srcversion && seen.depends && seen.noDepends && seen.aliases && seen.versions) {
			t.Errorf("kernel %s: test modules do not cover every field: %+v", kver, seen)
		}
	}
}

// TestCompressedCopies compresses real plain modules with the real xz, zstd
// and gzip programs and checks that each copy reads the same as the original,
// for us and for kmod.
func TestCompressedCopies(t *testing.T) {
	kver := plainKernel(t)
	dir := t.TempDir()
	for _, stem := range []string{"kernel/drivers/block/virtio_blk", "kernel/drivers/comedi/drivers/ni_pcidio", "kernel/net/netfilter/xt_LOG"} {
		src := findModule(t, kver, stem)
		orig, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(src)
		copies := map[string]string{
			CompressionZstd: writeFile(t, dir, base+".zst", run(t, "zstd", "-19", "-q", "-c", src)),
			CompressionGzip: writeFile(t, dir, base+".gz", run(t, "gzip", "-9", "-c", src)),
			// As the kernel's Makefile.modinst compresses them.
			CompressionXZ: writeFile(t, dir, base+".xz", run(t, "xz", "--check=crc32", "--lzma2=dict=1MiB", "-c", src)),
		}
		want, err := ReadFile(src)
		if err != nil {
			t.Fatalf("ReadFile(%q) error: %v", src, err)
		}
		for comp, file := range copies {
			t.Run(base+"/"+comp, func(t *testing.T) {
				image, gotComp, err := Open(file)
				if err != nil {
					t.Fatalf("Open(%q) error: %v", file, err)
				}
				if gotComp != comp {
					t.Errorf("Open(%q) compression = %q, want %q", file, gotComp, comp)
				}
				if !bytes.Equal(image, orig) {
					t.Errorf("Open(%q) gave %d bytes differing from the %d-byte original", file, len(image), len(orig))
				}
				info, err := ReadFile(file)
				if err != nil {
					t.Fatalf("ReadFile(%q) error: %v", file, err)
				}
				// Debian's kmod is built without zlib (kmod --version: -ZLIB), so
				// for gzip it reads the copy the real gzip decompresses.
				oracle := file
				if comp == CompressionGzip {
					oracle = writeFile(t, dir, "gunzipped-"+base, decompressCLI(t, file))
				}
				checkAgainstKmod(t, oracle, info)
				if info.Compression != comp || info.Size != int64(len(orig)) || info.Name != want.Name ||
					!slices.Equal(info.Versions, want.Versions) || info.Signed != want.Signed {
					t.Errorf("ReadFile(%q) = {Compression %q Size %d Name %q %d versions Signed %v}, want {%q %d %q %d %v}",
						file, info.Compression, info.Size, info.Name, len(info.Versions), info.Signed,
						comp, len(orig), want.Name, len(want.Versions), want.Signed)
				}
				// Detection goes by magic bytes: the same data under a
				// misleading name still decodes.
				data, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				misnamed := writeFile(t, dir, "misnamed-"+comp+".ko", data)
				if _, gotComp, err := Open(misnamed); err != nil || gotComp != comp {
					t.Errorf("Open(%q) = compression %q, error %v; want %q, nil", misnamed, gotComp, err, comp)
				}
			})
		}
	}
}

// plainKernel returns the first test kernel that ships plain .ko files.
func plainKernel(t testing.TB) string {
	t.Helper()
	for _, kver := range testKernels() {
		if strings.HasSuffix(findModule(t, kver, "kernel/lib/crc7"), ".ko") {
			return kver
		}
	}
	t.Fatalf("none of the kernels %v ships plain .ko files; the 6.1 kernel does: run scripts/deps.sh", testKernels())
	return ""
}

func TestSigned(t *testing.T) {
	dir := t.TempDir()
	for _, kver := range testKernels() {
		for _, stem := range []string{"kernel/drivers/block/virtio_blk", "kernel/lib/crc7"} {
			file := findModule(t, kver, stem)
			t.Run(kver+"/"+filepath.Base(file), func(t *testing.T) {
				// The oracle: the last 28 bytes of the image as the real
				// decompressor gives it (tail -c 28), and kmod's sig_id.
				image := decompressCLI(t, file)
				wantSigned := len(image) >= 28 && string(image[len(image)-28:]) == "~Module signature appended~\n"
				if kmodSigned := len(kmodField(t, "sig_id", file)) > 0; kmodSigned != wantSigned {
					t.Fatalf("%s: modinfo -F sig_id says signed=%v but the file tail says %v", file, kmodSigned, wantSigned)
				}
				info, err := ReadFile(file)
				if err != nil {
					t.Fatalf("ReadFile(%q) error: %v", file, err)
				}
				if info.Signed != wantSigned {
					t.Errorf("ReadFile(%q) Signed = %v, want %v", file, info.Signed, wantSigned)
				}
				if !wantSigned {
					return
				}
				// Debian signs its modules; strip the signature and look again.
				stripped := writeFile(t, dir, kver+"-"+filepath.Base(stem)+"-unsigned.ko", stripSignature(t, image))
				if sig := kmodField(t, "sig_id", stripped); len(sig) != 0 {
					t.Fatalf("modinfo -F sig_id %s = %q after stripping, want nothing", stripped, sig)
				}
				got, err := ReadFile(stripped)
				if err != nil {
					t.Fatalf("ReadFile(%q) error: %v", stripped, err)
				}
				if got.Signed {
					t.Errorf("ReadFile(%q) Signed = true, want false", stripped)
				}
				if got.Name != info.Name || got.Vermagic != info.Vermagic || !slices.Equal(got.Versions, info.Versions) {
					t.Errorf("ReadFile(%q) = %q %q %d versions, want %q %q %d as the signed original",
						stripped, got.Name, got.Vermagic, len(got.Versions), info.Name, info.Vermagic, len(info.Versions))
				}
			})
		}
	}
}

// TestAllModules reads every module of every test kernel and compares name and
// vermagic with kmod's modinfo run over all of them at once.
func TestAllModules(t *testing.T) {
	if testing.Short() {
		t.Skip("reads every module of both kernels; run without -short")
	}
	for _, kver := range testKernels() {
		dir := moduleDir(t, kver)
		var files []string
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.Contains(d.Name(), ".ko") {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(files) < 500 {
			t.Fatalf("only %d modules under %s: is the kernel tree complete? run scripts/deps.sh", len(files), dir)
		}
		names := lines(run(t, "modinfo", append([]string{"-F", "name"}, files...)...))
		vermagics := lines(run(t, "modinfo", append([]string{"-F", "vermagic"}, files...)...))
		if len(names) != len(files) || len(vermagics) != len(files) {
			t.Fatalf("modinfo printed %d names and %d vermagics for %d files", len(names), len(vermagics), len(files))
		}
		unsigned := 0
		for i, file := range files {
			info, err := ReadFile(file)
			if err != nil {
				t.Errorf("ReadFile(%q) error: %v", file, err)
				continue
			}
			if info.Name != names[i] || info.Vermagic != vermagics[i] {
				t.Errorf("ReadFile(%q) = name %q vermagic %q, want %q %q", file, info.Name, info.Vermagic, names[i], vermagics[i])
			}
			if !strings.HasPrefix(info.Vermagic, kver+" ") {
				t.Errorf("ReadFile(%q) Vermagic = %q, want prefix %q", file, info.Vermagic, kver+" ")
			}
			if !info.Signed {
				unsigned++
			}
		}
		// Debian signs every module it ships.
		if unsigned != 0 {
			t.Errorf("kernel %s: %d of %d modules read as unsigned, want 0", kver, unsigned, len(files))
		}
		t.Logf("kernel %s: %d modules agree with kmod", kver, len(files))
	}
}

// TestParse32Bit assembles a 32-bit module image with the real assembler and
// checks the 4-byte-CRC __versions layout against kmod.
func TestParse32Bit(t *testing.T) {
	dir := t.TempDir()
	src := writeFile(t, dir, "m32.s", []byte(`
	.section .modinfo,"a"
	.asciz "license=GPL"
	.asciz "depends=foo,bar"
	.asciz "alias=pci:v00001234d000011E8sv*sd*bc*sc*i*"
	.asciz "name=m32"
	.asciz "vermagic=6.1.0-test SMP mod_unload 686 "
	.section __versions,"a"
	.balign 32
	.long 0x12345678
	.ascii "module_layout"
	.fill 60-13,1,0
	.long 0xdeadbeef
	.ascii "printk"
	.fill 60-6,1,0
`))
	obj := filepath.Join(dir, "m32.ko")
	run(t, "as", "--32", "-o", obj, src)
	info, err := ReadFile(obj)
	if err != nil {
		t.Fatalf("ReadFile(%q) error: %v", obj, err)
	}
	checkAgainstKmod(t, obj, info)
	want := []Symbol{{"module_layout", 0x12345678}, {"printk", 0xdeadbeef}}
	if !slices.Equal(info.Versions, want) {
		t.Errorf("ReadFile(%q) Versions = %+v, want %+v", obj, info.Versions, want)
	}
	if info.Signed {
		t.Errorf("ReadFile(%q) Signed = true, want false", obj)
	}
}

// TestBadInput checks that malformed files give errors naming the file, and
// that partly damaged but still loadable images are read as the kernel would.
func TestBadInput(t *testing.T) {
	kver := plainKernel(t)
	src := findModule(t, kver, "kernel/drivers/block/virtio_blk")
	signed, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	image := stripSignature(t, signed)
	dir := t.TempDir()
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	xzData := run(t, "xz", "--check=crc32", "-c", src)
	zstData := run(t, "zstd", "-q", "-c", src)
	gzData := run(t, "gzip", "-c", src)

	type badCase struct {
		data []byte
		want string // a phrase the error must contain besides the file name
	}
	cases := map[string]badCase{
		"empty.ko":          {[]byte{}, "empty file"},
		"random.ko":         {random, "unknown format"},
		"elf-magic-only.ko": {[]byte("\x7fELF"), "truncated ELF image"},
		"text.ko":           {[]byte("not a module\n"), "unknown format"},
		"xz-header-only.ko": {xzData[:12], "no data"},
		"xz-half.ko.xz":     {xzData[:len(xzData)/2], "xz decompression"},
		"xz-cut-1.ko.xz":    {xzData[:len(xzData)-1], "xz decompression"},
		"zst-half.ko.zst":   {zstData[:len(zstData)/2], "zstd decompression"},
		"gz-half.ko.gz":     {gzData[:len(gzData)/2], "gzip decompression"},
		"gz-cut-1.ko.gz":    {gzData[:len(gzData)-1], "gzip decompression"},
		// Compressed data that is not an ELF image.
		"xz-of-text.ko.xz": {run(t, "sh", "-c", "echo hello | xz -c"), "not an ELF file"},
		// Signature magic with a length that cannot fit: EBADMSG to the kernel.
		"bad-sig.ko": {append(append(slices.Clone(image), 0, 0, 2, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff), "~Module signature appended~\n"...), "malformed module signature"},
		// Signature magic preceded by too few bytes.
		"tiny-sig.ko": {[]byte("\x7fELF~Module signature appended~\n"), "malformed module signature"},
	}
	for _, n := range []int{10, 64, 1000, len(image) / 2, len(image) - 1} {
		cases["truncated-at-"+strconv.Itoa(n)+".ko"] = badCase{image[:n], "truncated ELF image"}
	}
	cases["truncated-at-0.ko"] = badCase{image[:0], "empty file"}
	// Not a module: an ELF file without .modinfo (this test binary).
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exeData, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	cases["executable.ko"] = badCase{exeData, "not a kernel module"}

	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, dir, name, c.data)
			info, err := ReadFile(path)
			if err == nil {
				t.Fatalf("ReadFile(%q) = %+v, want an error", path, info)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ReadFile(%q) error %s, want one naming the file and saying %q", path, describe(err), c.want)
			}
			t.Logf("%s: %v", name, err)
		})
	}

	// Cutting into the signature leaves an intact ELF image with trailing
	// bytes: kmod and the kernel read that as an unsigned module, and so do we.
	for _, n := range []int{len(signed) - 1, len(image) + 100} {
		path := writeFile(t, dir, "sig-cut-"+strconv.Itoa(n)+".ko", signed[:n])
		info, err := ReadFile(path)
		if err != nil {
			t.Errorf("ReadFile(%q) error: %v, want none (the ELF image is intact)", path, err)
			continue
		}
		if info.Signed {
			t.Errorf("ReadFile(%q) Signed = true, want false", path)
		}
		checkAgainstKmod(t, path, info)
	}
}

func TestParseVersionsLayout(t *testing.T) {
	entry := func(crcBytes []byte, name string) []byte {
		e := make([]byte, versionEntrySize)
		copy(e, crcBytes)
		copy(e[len(crcBytes):], name)
		return e
	}
	cases := []struct {
		name    string
		data    []byte
		is32    bool
		want    []Symbol
		wantErr bool
	}{
		{"empty", nil, false, []Symbol{}, false},
		{"64-bit", entry([]byte{0x78, 0x56, 0x34, 0x12, 0, 0, 0, 0}, "printk"), false, []Symbol{{"printk", 0x12345678}}, false},
		{"32-bit", entry([]byte{0x78, 0x56, 0x34, 0x12}, "printk"), true, []Symbol{{"printk", 0x12345678}}, false},
		{"55-byte name", entry(make([]byte, 8), strings.Repeat("a", 55)), false, []Symbol{{strings.Repeat("a", 55), 0}}, false},
		{"unterminated name", entry(make([]byte, 8), strings.Repeat("a", 56)), false, nil, true},
		{"short entry", make([]byte, 63), false, nil, true},
	}
	for _, c := range cases {
		class := elf.ELFCLASS64
		if c.is32 {
			class = elf.ELFCLASS32
		}
		got, err := parseVersions(c.data, class, binary.LittleEndian)
		if (err != nil) != c.wantErr {
			t.Errorf("parseVersions(%s) error = %v, want error %v", c.name, err, c.wantErr)
			continue
		}
		if !c.wantErr && !slices.Equal(got, c.want) {
			t.Errorf("parseVersions(%s) = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// BenchmarkReadFile reads a mid-sized real module in each test kernel's
// compression (plain .ko on 6.1, .ko.xz on 6.12).
func BenchmarkReadFile(b *testing.B) {
	for _, kver := range testKernels() {
		file := findModule(b, kver, "kernel/drivers/net/ethernet/amazon/ena/ena")
		b.Run(kver+"/"+filepath.Base(file), func(b *testing.B) {
			for b.Loop() {
				if _, err := ReadFile(file); err != nil {
					b.Fatalf("ReadFile(%q) error: %v", file, err)
				}
			}
		})
	}
}

// TestReadFromSynthetic: a module compiled without a kernel, plain and
// compressed by the real xz, zstd and gzip, reads the same through ReadFile
// and through ReadFrom on the file opened, in the unit tier.
func TestReadFromSynthetic(t *testing.T) {
	src := testenv.SyntheticModule(t, "syn_read", "6.1.0-56-cloud-amd64")
	dir := t.TempDir()
	for _, c := range []struct{ comp, file string }{
		{"", src},
		{CompressionXZ, writeFile(t, dir, "syn_read.ko.xz", run(t, "xz", "--check=crc32", "-c", src))},
		{CompressionZstd, writeFile(t, dir, "syn_read.ko.zst", run(t, "zstd", "-q", "-c", src))},
		{CompressionGzip, writeFile(t, dir, "syn_read.ko.gz", run(t, "gzip", "-c", src))},
	} {
		want, err := ReadFile(c.file)
		if err != nil {
			t.Fatalf("ReadFile(%q): %v", c.file, err)
		}
		f, err := os.Open(c.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadFrom(f)
		f.Close()
		if err != nil {
			t.Fatalf("ReadFrom(%q): %v", c.file, err)
		}
		if got.Name != "syn_read" || got.Compression != c.comp || got.Vermagic != want.Vermagic || got.Size != want.Size || got.Compression != want.Compression {
			t.Errorf("ReadFrom(%q) = {Name %q Compression %q Vermagic %q Size %d}, ReadFile {%q %q %q %d}; want name syn_read, compression %q",
				c.file, got.Name, got.Compression, got.Vermagic, got.Size, want.Name, want.Compression, want.Vermagic, want.Size, c.comp)
		}
	}
}
