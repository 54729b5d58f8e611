package dkms

import (
	"bytes"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// shellQuote quotes s for a shell assignment in single quotes, a single
// quote in s closing them, escaped with a backslash, and opening them again.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// arrayKeyRE matches a Vars key of an array element, "NAME[i]".
var arrayKeyRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\[([0-9]+)\]$`)

// FuzzParseConf checks the dkms.conf parser, fed the dkms.conf of a recipe's
// source directory or of a driver's source package from the archive: no
// panic; an error comes without a Conf; an accepted file's typed fields agree
// with its Vars (a field holds the last assignment of its name, an array
// element that of NAME[i] or, for element 0, of NAME), array indexes stay
// within maxArrayIndex, Unparsed lines carry a line number of the file; and
// the Vars written back as single-quoted assignments parse to the same Vars,
// with nothing unparsed.
func FuzzParseConf(f *testing.F) {
	for _, p := range []string{"../../recipes/testdriver/dkms.conf", "../../recipes/testdriver-2/dkms.conf"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	for _, s := range []string{
		"", "PACKAGE_NAME=\"nvidia-current\"\nPACKAGE_VERSION=535.261.03\nAUTOINSTALL=yes\n",
		"BUILT_MODULE_NAME[0]=\"nvidia\"\nBUILT_MODULE_NAME[2]='nvidia-uvm'\nDEST_MODULE_LOCATION[0]=/updates/dkms\n",
		`MAKE[0]="make -C ${kernel_source_dir} M=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build KERNEL_UNAME=$kernelver modules"`,
		`CLEAN="echo \"a\\b\" \$x \n"`, `CLEAN='make "clean" $x \'`,
		"# a comment\n\n  PACKAGE_NAME=foo # trailing\r\nA=1; B=2\nC=3 D=4\n",
		"MAKE[0]=\"make \\\n  modules\"\nPOST_BUILD=\"a\nb\"\nX=one\\\ntwo\n",
		"PACKAGE_VERSION=$(cat VERSION | tr -d ' ')\nKV=`uname -r`\n",
		"if [ \"$kernelver\" = x ]; then\n  MAKE[0]=special\nfi\nA=1 some-command\nexport B=2\n",
		"MAKE=a\nMAKE[0]=b\nMAKE[3]=c\nMAKE=d\n", "A=\"open\nB=1\n", "A=$(echo\n", "A=`x\n", "A[99999999]=1\n",
		"A[4096]=x\n", "A=${x\n", "A=\\", "A='it'\\''s'\n", "export  X=1\nexport=2\n", "A=1#x\nB=2 #y\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := ParseConf(strings.NewReader(in))
		if err != nil {
			if c != nil {
				t.Fatalf("ParseConf returned %+v and error %v", c, err)
			}
			return
		}
		checkConf(t, in, c)
		var b strings.Builder
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range c.Vars {
				if !yield(k) {
					return
				}
			}
		}) {
			fmt.Fprintf(&b, "%s=%s\n", k, shellQuote(c.Vars[k]))
		}
		again, err := ParseConf(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("ParseConf of the Vars written back:\n%s\nerror %v", b.String(), err)
		}
		if !reflect.DeepEqual(again.Vars, c.Vars) || len(again.Unparsed) > 0 {
			t.Fatalf("Vars written back\n%s\nparse to %q (unparsed %q), want %q", b.String(), again.Vars, again.Unparsed, c.Vars)
		}
	})
}

// checkConf checks that c's typed fields agree with its Vars (see FuzzParseConf).
func checkConf(t *testing.T, in string, c *Conf) {
	t.Helper()
	scalars := map[string]string{
		"PACKAGE_NAME": c.PackageName, "PACKAGE_VERSION": c.PackageVersion, "CLEAN": c.Clean, "AUTOINSTALL": c.Autoinstall,
		"BUILD_EXCLUSIVE_KERNEL": c.BuildExclusiveKernel, "BUILD_EXCLUSIVE_ARCH": c.BuildExclusiveArch, "BUILD_EXCLUSIVE_CONFIG": c.BuildExclusiveConfig,
	}
	for name, got := range scalars {
		if got != c.Vars[name] {
			t.Fatalf("%s = %q, but Vars[%s] = %q", name, got, name, c.Vars[name])
		}
	}
	arrays := map[string][]string{
		"BUILT_MODULE_NAME": c.BuiltModuleName, "BUILT_MODULE_LOCATION": c.BuiltModuleLocation,
		"DEST_MODULE_NAME": c.DestModuleName, "DEST_MODULE_LOCATION": c.DestModuleLocation,
		"MAKE": c.Make, "MAKE_MATCH": c.MakeMatch,
	}
	for name, arr := range arrays {
		if len(arr) > maxArrayIndex+1 {
			t.Fatalf("%s has %d elements, more than maxArrayIndex allows", name, len(arr))
		}
		for i, got := range arr {
			elem, isElem := c.Vars[fmt.Sprintf("%s[%d]", name, i)]
			whole, isWhole := c.Vars[name]
			switch {
			case isElem && got == elem, i == 0 && isWhole && got == whole, !isElem && !(i == 0 && isWhole) && got == "":
			default:
				t.Fatalf("%s[%d] = %q, but Vars[%s[%d]] = %q (set %v), Vars[%s] = %q (set %v)", name, i, got, name, i, elem, isElem, name, whole, isWhole)
			}
		}
	}
	if n := max(len(c.BuiltModuleName), len(c.BuiltModuleLocation), len(c.DestModuleName), len(c.DestModuleLocation)); len(c.Modules()) != n {
		t.Fatalf("Modules() = %+v, want %d modules", c.Modules(), n)
	}
	for k := range c.Vars {
		if m := arrayKeyRE.FindStringSubmatch(k); m != nil {
			if i, err := strconv.Atoi(m[2]); err != nil || i > maxArrayIndex || m[2] != strconv.Itoa(i) {
				t.Fatalf("Vars key %q: index not a canonical number within %d", k, maxArrayIndex)
			}
		}
	}
	lines := strings.Count(in, "\n") + 1
	for _, u := range c.Unparsed {
		n, _, ok := strings.Cut(u, ": ")
		if i, err := strconv.Atoi(n); !ok || err != nil || i < 1 || i > lines {
			t.Fatalf("Unparsed line %q has no line number of the file (1..%d)", u, lines)
		}
	}
}

// The PKCS#7 SignedData of a module signature, as sign-file writes it
// (RFC 2315, detached, no certificates), for building test signatures.
type (
	testContentInfo struct {
		ContentType asn1.ObjectIdentifier
		Content     asn1.RawValue
	}
	testSignedData struct {
		Version          int
		DigestAlgorithms []pkix.AlgorithmIdentifier `asn1:"set"`
		ContentInfo      struct{ ContentType asn1.ObjectIdentifier }
		SignerInfos      []testSignerInfo `asn1:"set"`
	}
	testSignerInfo struct {
		Version         int
		SID             asn1.RawValue
		DigestAlgorithm pkix.AlgorithmIdentifier
		DigestEncAlg    pkix.AlgorithmIdentifier
		EncryptedDigest []byte
	}
	testIssuerAndSerial struct {
		Issuer asn1.RawValue
		Serial *big.Int
	}
)

// testSignature returns a module signature (the PKCS#7 DER and the trailer
// after it) naming the signer by issuer common name and serial, or by
// subject key identifier skid when it is not nil, made with hash.
func testSignature(cn string, serial *big.Int, skid []byte, hash asn1.ObjectIdentifier) ([]byte, error) {
	var sid asn1.RawValue
	if skid != nil {
		sid = asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, Bytes: skid}
	} else {
		issuer, err := asn1.Marshal(pkix.Name{CommonName: cn}.ToRDNSequence())
		if err != nil {
			return nil, err
		}
		ias, err := asn1.Marshal(testIssuerAndSerial{Issuer: asn1.RawValue{FullBytes: issuer}, Serial: serial})
		if err != nil {
			return nil, err
		}
		sid = asn1.RawValue{FullBytes: ias}
	}
	alg := pkix.AlgorithmIdentifier{Algorithm: hash}
	sd, err := asn1.Marshal(testSignedData{
		Version: 1, DigestAlgorithms: []pkix.AlgorithmIdentifier{alg},
		ContentInfo: struct{ ContentType asn1.ObjectIdentifier }{asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}},
		SignerInfos: []testSignerInfo{{Version: 1, SID: sid, DigestAlgorithm: alg,
			DigestEncAlg: pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}}, EncryptedDigest: []byte{1, 2, 3}}},
	})
	if err != nil {
		return nil, err
	}
	der, err := asn1.Marshal(testContentInfo{
		ContentType: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2},
		Content:     asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: sd},
	})
	if err != nil {
		return nil, err
	}
	return appendSigTrailer(der, len(der)), nil
}

// appendSigTrailer appends struct module_signature (PKCS#7, sigLen) and the magic.
func appendSigTrailer(b []byte, sigLen int) []byte {
	info := make([]byte, 12)
	info[2] = 2 // PKEY_ID_PKCS7
	binary.BigEndian.PutUint32(info[8:], uint32(sigLen))
	return append(append(b, info...), moduleSigMagic...)
}

var (
	sigKeyRE = regexp.MustCompile(`^([0-9A-F]{2}(:[0-9A-F]{2})*)?$`)
	// fuzzHashes are the digest OIDs FuzzSignatureRoundTrip picks from: those
	// sign-file uses, and one it does not (reported as its dotted OID).
	fuzzHashes = []asn1.ObjectIdentifier{{1, 3, 14, 3, 2, 26}, {2, 16, 840, 1, 101, 3, 4, 2, 4}, {2, 16, 840, 1, 101, 3, 4, 2, 1},
		{2, 16, 840, 1, 101, 3, 4, 2, 2}, {2, 16, 840, 1, 101, 3, 4, 2, 3}, {1, 2, 3, 4}}
)

// FuzzReadSignature checks the reader of a module's appended signature
// (struct module_signature and the PKCS#7 SignedData before it), fed module
// files built from recipes or stored in a cache: no panic; an error names the
// file and comes without a signature; an accepted signature has a digest
// algorithm and a SigKey in modinfo's form (upper-case hex pairs joined by
// ':'); and only the file's tail decides: bytes put in front of the module
// change nothing.
func FuzzReadSignature(f *testing.F) {
	for _, seed := range []struct {
		cn     string
		serial int64
		skid   []byte
	}{{"kpreload test signing key", 0x1234abcd, nil}, {"", 0, nil}, {"x", 1, []byte{0xde, 0xad, 0xbe, 0xef}}} {
		sig, err := testSignature(seed.cn, big.NewInt(seed.serial), seed.skid, fuzzHashes[2])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte("\x7fELF module"), sig...))
		f.Add(sig[:len(sig)-len(moduleSigMagic)-1])
	}
	for _, s := range []string{"", moduleSigMagic, "\x7fELF", string(appendSigTrailer(nil, 0)), string(appendSigTrailer([]byte{0x30, 0x00}, 2)),
		string(appendSigTrailer([]byte{0x30, 0x03, 0x06, 0x01, 0x00}, 5)), string(appendSigTrailer([]byte("abc"), 1<<31))} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	path, path2 := filepath.Join(dir, "m.ko"), filepath.Join(dir, "m2.ko")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sig, err := ReadSignature(path)
		if err != nil {
			if sig != nil {
				t.Fatalf("ReadSignature returned %+v and error %v", sig, err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
		} else if sig == nil || sig.HashAlgo == "" || !sigKeyRE.MatchString(sig.SigKey) {
			t.Fatalf("ReadSignature accepted %+v", sig)
		}
		if err := os.WriteFile(path2, append([]byte("\x7fELF prefix"), data...), 0o644); err != nil {
			t.Fatal(err)
		}
		sig2, err2 := ReadSignature(path2)
		if (err == nil) != (err2 == nil) || !reflect.DeepEqual(sig, sig2) {
			t.Fatalf("a prefix changes the signature: %+v, %v; with it %+v, %v", sig, err, sig2, err2)
		}
	})
}

// FuzzSignatureRoundTrip builds a module signature naming a signer (issuer
// common name and serial number, or a subject key identifier) and a digest
// algorithm, and checks that ReadSignature reports exactly that signer, key
// and algorithm, as kmod's modinfo would.
func FuzzSignatureRoundTrip(f *testing.F) {
	f.Add("kpreload test signing key", []byte{0x12, 0x34, 0xab, 0xcd}, uint8(2), false, []byte("\x7fELF"))
	f.Add("", []byte{}, uint8(0), false, []byte{})
	f.Add("Build time autogenerated kernel key", []byte{0x80, 0x00, 0x01}, uint8(5), false, []byte{0})
	f.Add("", []byte{0xde, 0xad, 0xbe, 0xef}, uint8(4), true, []byte("~Module signature appended~\n"))
	dir := f.TempDir()
	path := filepath.Join(dir, "m.ko")
	f.Fuzz(func(t *testing.T, cn string, id []byte, hash uint8, bySKID bool, module []byte) {
		if !utf8.ValidString(cn) {
			return
		}
		oid := fuzzHashes[int(hash)%len(fuzzHashes)]
		serial := new(big.Int).SetBytes(id)
		var skid []byte
		want := Signature{Signer: cn, SigKey: colonHex(serial.Bytes()), HashAlgo: hashOIDs[oid.String()]}
		if bySKID {
			skid = bytes.Clone(id)
			want = Signature{SigKey: colonHex(id), HashAlgo: hashOIDs[oid.String()]}
		}
		if want.HashAlgo == "" {
			want.HashAlgo = oid.String()
		}
		sig, err := testSignature(cn, serial, skid, oid)
		if err != nil {
			return // a name asn1 cannot encode
		}
		if err := os.WriteFile(path, append(bytes.Clone(module), sig...), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadSignature(path)
		if err != nil || *got != want {
			t.Fatalf("ReadSignature = %+v, %v; want %+v", got, err, want)
		}
	})
}
