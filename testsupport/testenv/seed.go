package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NoCloudSeed writes a cloud-init NoCloud seed as the clouds' tools make it
// for QEMU (cloud-localds -f vfat): a vfat disk labelled CIDATA holding
// user-data and meta-data (instance-id), and returns its path.
func NoCloudSeed(t testing.TB, userData, instanceID string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"user-data": userData,
		"meta-data": "instance-id: " + instanceID + "\nlocal-hostname: kpreload-test\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seed := filepath.Join(dir, "seed.img")
	for _, c := range [][]string{
		{"mkfs.vfat", "-n", "CIDATA", "-C", seed, "2048"},
		{"mcopy", "-i", seed, filepath.Join(dir, "user-data"), filepath.Join(dir, "meta-data"), "::"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	return seed
}

// ConfigDriveSeed writes an OpenStack config drive as a vfat image labelled
// CONFIG-2, holding userData as openstack/latest/user_data, and returns its
// path (kpreload boot --drive attaches it on virtio).
func ConfigDriveSeed(t testing.TB, userData string) string {
	t.Helper()
	dir := t.TempDir()
	ud := filepath.Join(dir, "user_data")
	meta := filepath.Join(dir, "meta_data.json")
	if err := os.WriteFile(ud, []byte(userData), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(meta, []byte(`{"uuid": "kpreload-test", "hostname": "kpreload-test"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(dir, "config-2.img")
	for _, c := range [][]string{
		{"mkfs.vfat", "-n", "CONFIG-2", "-C", seed, "2048"},
		{"mmd", "-i", seed, "::openstack", "::openstack/latest"},
		{"mcopy", "-i", seed, ud, meta, "::openstack/latest/"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	return seed
}
