package pid1

import (
	"fmt"
	"path/filepath"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/internal/inroot"
)

// imageFile is the instance request file baked into the mounted root, read
// inside the root: a link in the image is followed as it would be once the
// root is "/", never into the initramfs, and only a regular file is read.
func (b *Boot) imageFile() instance.File {
	return instance.File{Source: instance.SourceImage, Path: filepath.Join(b.o.NewRoot, instance.ImagePath),
		Read: b.readImageFile}
}

func (b *Boot) readImageFile() ([]byte, error) {
	return inroot.ReadFile(b.o.NewRoot, instance.ImagePath, instance.MaxFile)
}

// maxConsoleMessage bounds one warning or error as /init prints it on the
// console (the report keeps the whole text): a slow serial console must not
// spend the boot printing what an instance owner's input made long.
const maxConsoleMessage = 4 << 10

// consoleText is msg cut to maxConsoleMessage bytes, saying what was cut.
func consoleText(msg string) string {
	if len(msg) <= maxConsoleMessage {
		return msg
	}
	n := maxConsoleMessage
	for n > 0 && msg[n]&0xc0 == 0x80 { // not inside a UTF-8 sequence
		n--
	}
	return fmt.Sprintf("%s… (%d more bytes: the whole message is in the boot report)", msg[:n], len(msg)-n)
}
