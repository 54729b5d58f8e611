package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
)

// StatusPrefix starts the line kpreload-up.service writes on the report
// channel just before its UpUp record: `kpreload status --json` of the
// machine that came up, as one line of JSON, so a boot harness can check
// what the live machine says of itself. Its schema is builder/status's.
const StatusPrefix = "kpreload-status: "

// maxStatusLine bounds a status line: a few kernels, keys and problems.
const maxStatusLine = 1 << 20

// ScanStatus returns the JSON of the last intact status line in a report
// channel's log, nil when there is none. Lines may carry a trailing \r or
// text before the prefix; a line whose JSON is damaged is skipped.
func ScanStatus(log []byte) json.RawMessage {
	var last json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		i := strings.Index(line, StatusPrefix)
		if i < 0 || len(line)-i > maxStatusLine {
			continue
		}
		if raw := []byte(line[i+len(StatusPrefix):]); json.Valid(raw) && bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
			last = json.RawMessage(raw)
		}
	}
	return last
}
