package modsig

import (
	"bytes"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

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
	return append(append(b, info...), Magic...)
}

var (
	sigKeyRE = regexp.MustCompile(`^([0-9A-F]{2}(:[0-9A-F]{2})*)?$`)
	// fuzzHashes are the digest OIDs FuzzSignatureRoundTrip picks from: those
	// sign-file uses, and one it does not (reported as its dotted OID).
	fuzzHashes = []asn1.ObjectIdentifier{{1, 3, 14, 3, 2, 26}, {2, 16, 840, 1, 101, 3, 4, 2, 4}, {2, 16, 840, 1, 101, 3, 4, 2, 1},
		{2, 16, 840, 1, 101, 3, 4, 2, 2}, {2, 16, 840, 1, 101, 3, 4, 2, 3}, {1, 2, 3, 4}}
)

// FuzzReadFile checks the reader of a module's appended signature
// (struct module_signature and the PKCS#7 SignedData before it), fed module
// files built from recipes or stored in a cache: no panic; an error names the
// file and comes without a signature; an accepted signature has a digest
// algorithm and a SigKey in modinfo's form (upper-case hex pairs joined by
// ':'); and only the file's tail decides: bytes put in front of the module
// change nothing.
func FuzzReadFile(f *testing.F) {
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
		f.Add(sig[:len(sig)-len(Magic)-1])
	}
	for _, s := range []string{"", Magic, "\x7fELF", string(appendSigTrailer(nil, 0)), string(appendSigTrailer([]byte{0x30, 0x00}, 2)),
		string(appendSigTrailer([]byte{0x30, 0x03, 0x06, 0x01, 0x00}, 5)), string(appendSigTrailer([]byte("abc"), 1<<31))} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	path, path2 := filepath.Join(dir, "m.ko"), filepath.Join(dir, "m2.ko")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sig, err := ReadFile(path)
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
		sig2, err2 := ReadFile(path2)
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
		want := Signature{Signer: cn, SigKey: ColonHex(serial.Bytes()), HashAlgo: hashOIDs[oid.String()]}
		if bySKID {
			skid = bytes.Clone(id)
			want = Signature{SigKey: ColonHex(id), HashAlgo: hashOIDs[oid.String()]}
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
		got, err := ReadFile(path)
		if err != nil || *got != want {
			t.Fatalf("ReadSignature = %+v, %v; want %+v", got, err, want)
		}
	})
}
