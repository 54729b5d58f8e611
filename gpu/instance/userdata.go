package instance

import (
	"bytes"
	"errors"
	"fmt"

	"gopkg.in/yaml.v3"
)

// UserDataKey is the top-level key of a #cloud-config document that carries
// an instance request, in the instance YAML's schema:
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

// ParseUserData reads the instance request in the user-data document data
// (name labels errors, which carry the line in data and the field path
// under kpreload). found is false when data is a #cloud-config document
// without a kpreload key; err wraps ErrNotCloudConfig when data is not a
// plain #cloud-config document at all.
func ParseUserData(name string, data []byte) (in *Instance, found bool, err error) {
	return parseUserData(name, data, nil)
}

// UserDataRequest reads the request in the user-data document data as a
// request from source, named name (where the version was asked, file:line,
// included); found and err are ParseUserData's.
func UserDataRequest(source, name string, data []byte) (req Request, found bool, err error) {
	var line int
	in, found, err := parseUserData(name, data, &line)
	if err != nil || !found {
		return Request{}, found, err
	}
	req = Request{Source: source, Origin: name, Instance: *in}
	if line > 0 {
		req.VersionAt = fmt.Sprintf("%s:%d", name, line)
	}
	return req, true, nil
}

// parseUserData is ParseUserData that also sets *versionLine (when not nil)
// to the line of kpreload.resources.driver.version, or 0.
func parseUserData(name string, data []byte, versionLine *int) (in *Instance, found bool, err error) {
	if len(data) > MaxUserData {
		return nil, false, fmt.Errorf("%s: %d bytes, more than the %d read", name, len(data), MaxUserData)
	}
	body := bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	first, _, _ := bytes.Cut(body, []byte("\n"))
	if !bytes.Equal(bytes.TrimRight(first, " \t\r"), []byte("#cloud-config")) {
		return nil, false, fmt.Errorf("%s: %w (it starts with %q)", name, ErrNotCloudConfig, head(first))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, false, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("%s:%d: want a mapping of cloud-config keys, got %s", name, root.Line, describe(root))
	}
	var node *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == UserDataKey {
			if node != nil {
				return nil, false, fmt.Errorf("%s:%d: %s: given twice", name, root.Content[i].Line, UserDataKey)
			}
			node = root.Content[i+1]
		}
	}
	if node == nil {
		return nil, false, nil
	}
	in, err = parseNode(name, node, UserDataKey, versionLine)
	if err != nil {
		return nil, true, err
	}
	return in, true, nil
}

// head is the start of a line, for messages.
func head(b []byte) string {
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}
