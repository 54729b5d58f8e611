package report

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// rootInitSeed is a root-init record as the test root's /sbin/init prints it.
const rootInitSeed = `{"format":1,"pid":1,"start":1.52,"end":1.61,"kernel":"6.1.0-56-cloud-amd64","cmdline":"root=/dev/vda console=ttyS0","root":{"device":"/dev/root","fstype":"ext4","options":"ro,relatime","block_device":"/dev/vda"},"report":{"format":1,"kernel":"6.1.0-56-cloud-amd64"},"driver_link":"/opt/kpreload/drivers/1.0.0","ready":{"driver":"kpreload-edu"},"modules":["kpreload_edu","virtio_blk"],"pci":[{"address":"0000:00:03.0","vendor":"1234","device":"11e8","class":"00ff00","driver":"kpreload_edu","edu_id":"0x010000ed"}],"kmsg":[{"t":1.2,"level":6,"text":"kpreload_edu: probe"}],"mounted":["/proc"],"errors":["x"]}`

// FuzzDecodeRootInit checks the decoder of the root-init record, which a
// booted VM (the guest, not to be trusted) prints on its console: no panic;
// an error comes without a record; an accepted record prints (ConsoleLine)
// as one line that Scan finds again and that decodes to the same record.
func FuzzDecodeRootInit(f *testing.F) {
	for _, s := range []string{rootInitSeed, "", "{}", "null", "[]", `{"format":"1"}`, `{"report":{"a":  [1, 2]},"ready":null}`,
		`{"cmdline":"a\nb\r\u2028","kmsg":[{"t":1e308,"level":-1}]}`, `{"pid":1} {}`, `{"kernel":"\ud800"}`, `{"Report":1,"report":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := DecodeRootInit(raw)
		if err != nil {
			if r != nil {
				t.Fatalf("DecodeRootInit returned %+v and error %v", r, err)
			}
			return
		}
		line, err := r.ConsoleLine()
		if err != nil {
			t.Fatalf("ConsoleLine of %+v: %v", r, err)
		}
		if strings.ContainsAny(line, "\n\r") || !strings.HasPrefix(line, RootInitPrefix) {
			t.Fatalf("ConsoleLine = %q: not one line starting with the prefix", line)
		}
		_, found, err := Scan(strings.NewReader("noise\n" + line + "\r\n"))
		if err != nil || found == nil {
			t.Fatalf("Scan does not find the line %q: %v", line, err)
		}
		again, err := DecodeRootInit(found)
		if err != nil {
			t.Fatalf("DecodeRootInit(%s): %v", found, err)
		}
		// Embedded JSON comes back compacted: compare what both print.
		line2, err := again.ConsoleLine()
		if err != nil || line2 != line {
			t.Fatalf("the record printed again differs:\n%s\n%s (%v)", line, line2, err)
		}
	})
}

// FuzzScan checks the console log reader, fed a VM's serial console (what
// the guest prints, kernel messages cutting into lines included): no panic;
// a report found decodes from a line that carries the prefix, a root-init
// record found is valid JSON; and whatever comes before them, an intact
// report line and root-init line at the end of the log are the ones found.
func FuzzScan(f *testing.F) {
	rep := Report{Format: 1, Kernel: "6.1.0-56-cloud-amd64", Cmdline: "root=/dev/vda", Root: Root{Device: "/dev/vda"}}
	repLine, err := rep.ConsoleLine()
	if err != nil {
		f.Fatal(err)
	}
	riLine := RootInitPrefix + rootInitSeed
	for _, s := range []string{"", "noise\n" + repLine + "\r\n" + riLine + "\n", repLine[:40] + "[    1.2] kernel\n" + repLine, ConsolePrefix + "\n" + RootInitPrefix,
		ConsolePrefix + "null\n" + RootInitPrefix + "null", ConsolePrefix + ConsolePrefix + "{}\n", "x" + RootInitPrefix + "{}\r\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, log []byte) {
		got, ri, err := Scan(bytes.NewReader(log))
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if got != nil && !bytes.Contains(log, []byte(ConsolePrefix)) {
			t.Fatalf("Scan found a report %+v in a log without %q", got, ConsolePrefix)
		}
		if ri != nil && (!json.Valid(ri) || !bytes.Contains(log, ri)) {
			t.Fatalf("Scan found a root-init record %q that is not valid JSON from the log", ri)
		}
		got, ri, err = Scan(bytes.NewReader(append(append(bytes.Clone(log), '\n'), repLine+"\n"+riLine+"\n"...)))
		if err != nil || got == nil || !reflect.DeepEqual(*got, rep) || string(ri) != rootInitSeed {
			t.Fatalf("Scan after the log = %+v, %s, %v; want the report and root-init line appended", got, ri, err)
		}
	})
}
