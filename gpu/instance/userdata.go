package instance

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// WriteFilesPath is the path of the write_files entry of a #cloud-config
// document that carries an instance request, in the instance YAML's schema:
//
//	#cloud-config
//	write_files:
//	  - path: /etc/kpreload/instance.yaml
//	    content: |
//	      resources:
//	        driver:
//	          version: "550"
//
// Every cloud-init accepts it (the top-level kpreload: key fails the schema
// of cloud-init 23.4 and later); /init reads it from a seed before cloud-init
// runs, and cloud-init then writes it where the image's own request is
// (ImagePath), so later boots keep it.
const WriteFilesPath = "/" + ImagePath

// UserDataKey is the top-level key of a #cloud-config document that carried
// an instance request before the write_files entry (WriteFilesPath). It is
// still read, with a deprecation note: cloud-init 22.4 (Debian 12) accepts
// it, cloud-init 23.4 and later (Debian 13's 25.1) reject it in their schema
// check and count the warning as a recoverable error.
//
//	#cloud-config
//	kpreload:
//	  resources:
//	    driver:
//	      version: "550"
const UserDataKey = "kpreload"

// MaxUserData bounds the user-data read from a seed (cloud-init's own
// limit on most clouds is 16 KiB to 64 KiB; a seed file may be larger).
const MaxUserData = 1 << 20

// ErrNotCloudConfig says user-data is not a plain #cloud-config document
// (a MIME multipart archive, a script, gzip'd data...): only cloud-init can
// read the request in it, after boot.
var ErrNotCloudConfig = errors.New("not a plain #cloud-config document")

// DeprecatedKeyNote is the note a request read from the top-level kpreload:
// key carries (Request.Notes): the report and the console show it.
const DeprecatedKeyNote = "the top-level " + UserDataKey + ": key of #cloud-config is deprecated: cloud-init 23.4 and later reject it in their schema check " +
	"(\"'kpreload' was unexpected\", a recoverable error in cloud-init status); carry the request as a write_files entry for " + WriteFilesPath

// writeFilesEncodings are the write_files encodings cloud-init knows, by
// what they decode: base64, then gzip.
var writeFilesEncodings = map[string]struct{ b64, gz bool }{
	"": {}, "text/plain": {},
	"b64": {b64: true}, "base64": {b64: true},
	"gz": {gz: true}, "gzip": {gz: true},
	"gz+b64": {b64: true, gz: true}, "gz+base64": {b64: true, gz: true},
	"gzip+b64": {b64: true, gz: true}, "gzip+base64": {b64: true, gz: true},
}

// ParseUserData reads the instance request in the user-data document data
// (name labels errors, which carry the line in data and the field path):
// the content of its write_files entry for WriteFilesPath, or its top-level
// kpreload key (deprecated). found is false when data is a #cloud-config
// document with neither; err wraps ErrNotCloudConfig when data is not a
// plain #cloud-config document at all.
func ParseUserData(name string, data []byte) (in *Instance, found bool, err error) {
	r, err := parseUserData(name, data)
	return r.in, r.found, err
}

// UserDataRequest reads the request in the user-data document data as a
// request from source, named name (where the version was asked, file:line,
// included; a request under the deprecated kpreload: key carries
// DeprecatedKeyNote); found and err are ParseUserData's.
func UserDataRequest(source, name string, data []byte) (req Request, found bool, err error) {
	r, err := parseUserData(name, data)
	if err != nil || !r.found {
		var req Request
		if r.legacy {
			req.Notes = []string{fmt.Sprintf("%s: %s", source, DeprecatedKeyNote)}
		}
		return req, r.found, err
	}
	return r.request(source, name, nil), true, nil
}

// userData is what parseUserData read.
type userData struct {
	in    *Instance
	found bool
	// legacy says the request was under the top-level kpreload: key.
	legacy bool
	// at names where the version was asked ("file:line"), or "".
	at string
}

// request is the request r read, from source, named name, after notes.
func (r userData) request(source, name string, notes []string) Request {
	req := Request{Source: source, Origin: name, Instance: *r.in, VersionAt: r.at, Notes: notes}
	if r.legacy {
		req.Notes = append(slices.Clone(req.Notes), fmt.Sprintf("%s: %s", source, DeprecatedKeyNote))
	}
	return req
}

// parseUserData reads the request of a #cloud-config document: the write_files
// entry for WriteFilesPath or the top-level kpreload key (both is an error).
func parseUserData(name string, data []byte) (userData, error) {
	if len(data) > MaxUserData {
		return userData{}, fmt.Errorf("%s: %d bytes, more than the %d read", name, len(data), MaxUserData)
	}
	body := bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	first, _, _ := bytes.Cut(body, []byte("\n"))
	if !bytes.Equal(bytes.TrimRight(first, " \t\r"), []byte("#cloud-config")) {
		return userData{}, fmt.Errorf("%s: %w (it starts with %q)", name, ErrNotCloudConfig, head(first))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil {
		return userData{}, fmt.Errorf("%s: %w", name, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return userData{}, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			return userData{}, nil
		}
		return userData{}, fmt.Errorf("%s:%d: want a mapping of cloud-config keys, got %s", name, root.Line, describe(root))
	}
	var key, files *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		var p **yaml.Node
		switch k.Value {
		case UserDataKey:
			p = &key
		case "write_files":
			p = &files
		default:
			continue
		}
		if *p != nil {
			return userData{}, fmt.Errorf("%s:%d: %s: given twice", name, k.Line, k.Value)
		}
		*p = root.Content[i+1]
	}
	entry, err := writeFilesEntry(name, files)
	if err != nil {
		return userData{}, err
	}
	switch {
	case entry != nil && key != nil:
		return userData{}, fmt.Errorf("%s:%d: both a top-level %s: key and a write_files entry for %s (line %d): give the request once, in the write_files entry",
			name, key.Line, UserDataKey, WriteFilesPath, entry.Line)
	case entry != nil:
		return parseWriteFilesEntry(name, entry)
	case key != nil:
		var line int
		in, err := parseNode(name, key, UserDataKey, &line)
		if err != nil {
			return userData{found: true, legacy: true}, err
		}
		r := userData{in: in, found: true, legacy: true}
		if line > 0 {
			r.at = fmt.Sprintf("%s:%d", name, line)
		}
		return r, nil
	}
	return userData{}, nil
}

// writeFilesEntry returns the one entry of write_files (nil: absent) whose
// path is WriteFilesPath, or nil. Other entries are cloud-init's business;
// a path that names the same file otherwise, or a second entry for it, is
// an error (which of them cloud-init writes last is not /init's guess).
func writeFilesEntry(name string, files *yaml.Node) (*yaml.Node, error) {
	if files == nil || (files.Kind == yaml.ScalarNode && files.Tag == "!!null") {
		return nil, nil
	}
	if files.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: write_files: want a list of files, got %s", name, files.Line, describe(files))
	}
	var found *yaml.Node
	for _, e := range files.Content {
		if e.Kind != yaml.MappingNode {
			continue
		}
		p := mapValue(e, "path")
		if p == nil || p.Kind != yaml.ScalarNode {
			continue
		}
		if p.Value != WriteFilesPath {
			if c := path.Clean("/" + strings.TrimSpace(p.Value)); c == WriteFilesPath {
				return nil, fmt.Errorf("%s:%d: write_files path %q: write it as %s exactly", name, p.Line, quoteUnprintable(cutUTF8(p.Value, 80)), WriteFilesPath)
			}
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%s:%d: write_files: %s given twice (lines %d and %d)", name, p.Line, WriteFilesPath, found.Line, e.Line)
		}
		found = e
	}
	return found, nil
}

// mapValue returns the value of key in mapping m, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// parseWriteFilesEntry decodes the entry's content (its encoding, bounded
// by MaxFile) and parses it as an instance YAML. A literal block's lines
// are named by their lines in the user-data; decoded content's by its own
// lines, under a name that says so.
func parseWriteFilesEntry(name string, e *yaml.Node) (userData, error) {
	what := fmt.Sprintf("%s:%d: write_files %s", name, e.Line, WriteFilesPath)
	for i := 0; i+1 < len(e.Content); i += 2 {
		k, v := e.Content[i].Value, e.Content[i+1]
		switch k {
		case "append":
			// cloud-init's boolean: YAML's true, or a string it reads as one.
			if v.Kind == yaml.ScalarNode && slices.Contains([]string{"true", "yes", "on", "y", "1"}, strings.ToLower(strings.TrimSpace(v.Value))) {
				return userData{found: true}, fmt.Errorf("%s: append: true adds the content to the image's own file: not honoured (write the whole request)", what)
			}
		case "source":
			return userData{found: true}, fmt.Errorf("%s: source: is fetched by cloud-init after boot, not read by /init: give the request as content", what)
		}
	}
	enc := ""
	if v := mapValue(e, "encoding"); v != nil {
		if v.Kind != yaml.ScalarNode {
			return userData{found: true}, fmt.Errorf("%s: encoding: want a string, got %s", what, describe(v))
		}
		enc = strings.ToLower(strings.TrimSpace(v.Value))
	}
	how, ok := writeFilesEncodings[enc]
	if !ok {
		return userData{found: true}, fmt.Errorf("%s: encoding %q: unknown (known: text/plain, b64, base64, gz, gzip, gz+b64, gzip+base64)", what, quoteUnprintable(cutUTF8(enc, 40)))
	}
	c := mapValue(e, "content")
	var content []byte
	binary := false
	if c != nil {
		if c.Kind != yaml.ScalarNode {
			return userData{found: true}, fmt.Errorf("%s: content: want a string, got %s", what, describe(c))
		}
		if c.Tag != "!!null" {
			content = []byte(c.Value)
		}
		if c.Tag == "!!binary" {
			// YAML's own base64: bytes, as cloud-init's YAML loader gives them.
			b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(c.Value), ""))
			if err != nil {
				return userData{found: true}, fmt.Errorf("%s: content: !!binary: %w", what, err)
			}
			content, binary = b, true
		}
	}
	decoded := how.b64 || how.gz || binary
	if how.b64 {
		b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(content)), ""))
		if err != nil {
			return userData{found: true}, fmt.Errorf("%s: content: encoding %s: not base64: %w", what, enc, err)
		}
		content = b
	}
	if how.gz {
		zr, err := gzip.NewReader(bytes.NewReader(content))
		if err != nil {
			return userData{found: true}, fmt.Errorf("%s: content: encoding %s: not gzip: %w", what, enc, err)
		}
		b, err := io.ReadAll(io.LimitReader(zr, MaxFile+1))
		if err != nil {
			return userData{found: true}, fmt.Errorf("%s: content: encoding %s: %w", what, enc, err)
		}
		if len(b) > MaxFile {
			return userData{found: true}, fmt.Errorf("%s: content: encoding %s: more than %d bytes uncompressed", what, enc, MaxFile)
		}
		content = b
	}
	var doc yaml.Node
	if !decoded && c != nil && c.Style == yaml.LiteralStyle {
		// The block's lines are the user-data's, from the line after "|".
		if err := yaml.Unmarshal(content, &doc); err != nil {
			return userData{found: true}, fmt.Errorf("%s: content: %w", what, err)
		}
		shiftLines(&doc, c.Line)
	} else {
		label := "text"
		switch {
		case binary:
			label = strings.TrimSpace(enc + " !!binary")
		case decoded:
			label = enc
		}
		name = fmt.Sprintf("%s write_files %s (%s)", name, WriteFilesPath, label)
		if err := yaml.Unmarshal(content, &doc); err != nil {
			return userData{found: true}, fmt.Errorf("%s: %w", name, err)
		}
	}
	var line int
	in := &Instance{}
	if doc.Kind != 0 && len(doc.Content) > 0 {
		var err error
		if in, err = parseNode(name, doc.Content[0], "", &line); err != nil {
			return userData{found: true}, err
		}
	}
	r := userData{in: in, found: true}
	if line > 0 {
		r.at = fmt.Sprintf("%s:%d", name, line)
	}
	return r, nil
}

// shiftLines adds by to the line of every node under n.
func shiftLines(n *yaml.Node, by int) {
	n.Line += by
	for _, c := range n.Content {
		shiftLines(c, by)
	}
}

// head is the start of a line, for messages.
func head(b []byte) string {
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}
