package install

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

// efiVar is an EFI variable as efivarfs shows it: attributes, then the
// value, here a UTF-16LE string with its NUL.
func efiVar(s string) string {
	b := []byte{7, 0, 0, 0}
	for _, c := range append(utf16.Encode([]rune(s)), 0) {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	return string(b)
}

// TestBootOK: once the real init is up after kpreload's /init, GRUB's
// next_entry is unset only when it names one of kpreload's entries, and
// systemd-boot's counted kpreload entry gets its good name unless the root
// has systemd-bless-boot; a boot that did not come through kpreload's /init
// (the fallback entry's) changes nothing.
func TestBootOK(t *testing.T) {
	k := testKernel
	bootCount := efiVar(`\loader\entries\kpreload-` + k + `+1-1.conf`)
	tests := []struct {
		name     string
		files    map[string]string
		noReport bool
		edits    []string // grub-editenv runs, as their arguments
		entries  []string // the ESP's entries afterwards
		says     string
	}{{
		name:  "GRUB: kpreload's fallback is cleared",
		files: map[string]string{GrubEnvFile: "# GRUB Environment Block\nnext_entry=kpreload-distribution-" + k + "\n####"},
		edits: []string{"/boot/grub/grubenv unset next_entry"},
		says:  "cleared GRUB's one-shot fallback next_entry=kpreload-distribution-" + k,
	}, {
		name:  "GRUB: a user's grub-reboot is left",
		files: map[string]string{GrubEnvFile: "# GRUB Environment Block\nnext_entry=gnulinux-advanced-1234\n####"},
		says:  "GRUB's next_entry=gnulinux-advanced-1234 is not kpreload's fallback: left as it is",
	}, {
		name:     "GRUB: not booted by kpreload's /init (the fallback entry): nothing",
		files:    map[string]string{GrubEnvFile: "# GRUB Environment Block\nnext_entry=kpreload-" + k + "\n####"},
		noReport: true,
		says:     "this boot did not come through kpreload's /init",
	}, {
		name: "systemd-boot: the counted entry is marked good",
		files: map[string]string{
			"efivars/" + loaderBootCountPath:                      bootCount,
			"boot/efi/loader/entries/kpreload-" + k + "+1-1.conf": "title k\n",
			"boot/efi/loader/entries/debian-" + k + ".conf":       "title d\n",
		},
		entries: []string{"debian-" + k + ".conf", EntryName(k)},
		says:    "marked systemd-boot entry kpreload-" + k + "+1-1.conf good: " + EntryName(k),
	}, {
		name: "systemd-boot: left to systemd-bless-boot where the root has it",
		files: map[string]string{
			"efivars/" + loaderBootCountPath:                      bootCount,
			"boot/efi/loader/entries/kpreload-" + k + "+1-1.conf": "title k\n",
			"lib/systemd/systemd-bless-boot":                      "",
		},
		entries: []string{"kpreload-" + k + "+1-1.conf"},
		says:    "left to systemd-bless-boot",
	}, {
		name: "systemd-boot: another entry counted is not kpreload's to bless",
		files: map[string]string{
			"efivars/" + loaderBootCountPath:                    efiVar(`\loader\entries\debian-` + k + `+2-1.conf`),
			"boot/efi/loader/entries/debian-" + k + "+2-1.conf": "title d\n",
		},
		entries: []string{"debian-" + k + "+2-1.conf"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{"run/kpreload/report.json": "{}", "boot/efi/loader/entries/": ""}
			if tt.noReport {
				delete(files, "run/kpreload/report.json")
			}
			for p, s := range tt.files {
				files[p] = s
			}
			root := fakeRoot(t, files)
			var edits []string
			var log bytes.Buffer
			done, err := BootOK(context.Background(), BootOKOptions{
				Root: root, Report: filepath.Join(root, "run/kpreload/report.json"), EFIVars: filepath.Join(root, "efivars"), Log: &log,
				EditEnv: func(_ context.Context, r string, args ...string) error {
					if r != root {
						t.Errorf("grub-editenv in %s, want %s", r, root)
					}
					edits = append(edits, strings.Join(args, " "))
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(edits, tt.edits) {
				t.Errorf("grub-editenv runs %q, want %q", edits, tt.edits)
			}
			if tt.says != "" && !strings.Contains(strings.Join(done, "\n"), tt.says) || !strings.Contains(log.String(), tt.says) {
				t.Errorf("says %q (log %q), want %q", done, log.String(), tt.says)
			}
			if tt.entries != nil {
				ents, _ := os.ReadDir(filepath.Join(root, "boot/efi/loader/entries"))
				var got []string
				for _, e := range ents {
					got = append(got, e.Name())
				}
				if !slices.Equal(got, tt.entries) {
					t.Errorf("entries %q, want %q", got, tt.entries)
				}
			}
		})
	}
}

// TestEnsureGrubEnv: a root without GRUB's environment block gets an empty
// one, as grub-editenv creates it (1024 bytes); one that has it keeps it.
func TestEnsureGrubEnv(t *testing.T) {
	root := fakeRoot(t, map[string]string{"boot/grub/": ""})
	if err := EnsureGrubEnv(root); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(root, GrubEnvFile))
	head := "# GRUB Environment Block\n# WARNING: Do not edit this file by tools other than grub-editenv!!!\n"
	if len(b) != 1024 || !strings.HasPrefix(string(b), head) || strings.Trim(string(b[len(head):]), "#") != "" {
		t.Errorf("grubenv = %q (%d bytes), want an empty block of 1024", b, len(b))
	}
	kept := "# GRUB Environment Block\nsaved_entry=x\n" + strings.Repeat("#", 1024-39)
	root = fakeRoot(t, map[string]string{GrubEnvFile: kept})
	if err := EnsureGrubEnv(root); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, GrubEnvFile)); string(b) != kept {
		t.Errorf("an existing grubenv was changed to %q", b)
	}
}
