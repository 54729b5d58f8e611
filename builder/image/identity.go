package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// An image is copied to every instance made from it, so it must carry nothing
// that identifies one machine: no SSH host keys (anyone holding one instance
// could impersonate the others), no machine-id (journald, DHCP client ids and
// dbus derive from it), no random seed. Each instance makes its own at first
// boot: systemd writes /etc/machine-id when it finds it empty, cloud-init (in
// images built with CloudInit) or kpreload-ssh-host-keys.service the host keys.

// CloudInitPackages are what Options.CloudInit adds: Debian's cloud-init,
// growpart (cloud-guest-utils) to grow the root partition to the disk, the
// SSH server whose keys and users it sets up, and sudo for the default user.
var CloudInitPackages = []string{"cloud-init", "cloud-guest-utils", "openssh-server", "sudo"}

// cloudInitConfigPath is the cloud-init configuration a CloudInit image adds.
const cloudInitConfigPath = "etc/cloud/cloud.cfg.d/90-kpreload.cfg"

// cloudInitConfig names the datasources the clouds use, in the order
// cloud-init tries them (NoCloud and ConfigDrive first: seeds on a disk need
// no network), and grows the root partition and filesystem to the disk.
const cloudInitConfig = `# Written by kpreload image build.
datasource_list: [ NoCloud, ConfigDrive, Ec2, GCE, Azure, OpenStack, None ]
growpart:
  mode: auto
  devices: ['/']
resize_rootfs: true
# The instance's hostname (from its metadata) in /etc/hosts, so it resolves.
manage_etc_hosts: true
`

// sshHostKeysUnit makes an instance's SSH host keys at its first boot where
// nothing else did (cloud-init does, where it runs first).
const sshHostKeysUnit = `# Written by kpreload image build: the image carries no SSH host keys.
[Unit]
Description=Make this instance's SSH host keys
ConditionPathExists=/usr/sbin/sshd
ConditionPathExistsGlob=!/etc/ssh/ssh_host_*_key
After=cloud-init.service
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
`

// sshHostKeysUnitName is sshHostKeysUnit's name.
const sshHostKeysUnitName = "kpreload-ssh-host-keys.service"

// resetIdentity removes what identifies one machine from root: SSH host keys,
// the machine-id (left empty, so systemd makes one at first boot), dbus's own
// copy and systemd's random seed; and, where the root has an SSH server,
// enables sshHostKeysUnit.
func resetIdentity(ctx context.Context, sc Systemctl, root string) error {
	keys, err := filepath.Glob(filepath.Join(root, "etc/ssh/ssh_host_*"))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := os.Remove(k); err != nil {
			return fmt.Errorf("identity: %w", err)
		}
	}
	if err := writeFile(filepath.Join(root, "etc/machine-id"), nil, 0o444); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	for _, p := range []string{"var/lib/dbus/machine-id", "var/lib/systemd/random-seed"} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Mode()&fs.ModeSymlink != 0) {
			continue // absent, or a link to /etc/machine-id
		}
		if err := os.Remove(filepath.Join(root, p)); err != nil {
			return fmt.Errorf("identity: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "usr/sbin/sshd")); err != nil {
		return nil
	}
	if err := writeFile(filepath.Join(root, "etc/systemd/system", sshHostKeysUnitName), []byte(sshHostKeysUnit), 0o644); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if err := sc.Enable(ctx, root, sshHostKeysUnitName); err != nil {
		return fmt.Errorf("identity: enable %s: %w", sshHostKeysUnitName, err)
	}
	return nil
}

// configureCloudInit writes cloudInitConfig into a root that has cloud-init.
func configureCloudInit(root string) error {
	if _, err := os.Stat(filepath.Join(root, "usr/bin/cloud-init")); err != nil {
		return fmt.Errorf("cloud-init: not installed in the image: %w", err)
	}
	return writeFile(filepath.Join(root, cloudInitConfigPath), []byte(cloudInitConfig), 0o644)
}
