package cachecmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
)

func newCacheKeygenCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "keygen NAME",
		Annotations: map[string]string{mistakes.ArgsNote: "the key pair's name"},
		Short:       "Make an Ed25519 key pair for signing cells (NAME.key, NAME.pub)",
		Long: `Keygen writes a new Ed25519 key pair: NAME.key, the private key (PEM,
PKCS #8, mode 0600; it is never overwritten) that builders sign the cells
they push with (kpreload build --remote ... --sign NAME.key), and NAME.pub,
the public key that every puller trusts (--trust NAME.pub). It prints the
key's id, which signed cells name. The files are what OpenSSL makes too:

  openssl genpkey -algorithm ed25519 -out NAME.key
  openssl pkey -in NAME.key -pubout -out NAME.pub

Keep NAME.key where only the builders can read it (a CI secret, a
Kubernetes Secret); NAME.pub may be anywhere, in images included.`,
		Example: `  kpreload cache keygen team
  kpreload build testdriver --kernel 6.1.0-56-cloud-amd64 --remote oci://127.0.0.1:5055/team --plain-http --sign team.key
  kpreload cache pull --remote oci://127.0.0.1:5055/team --plain-http --trust team.pub`,
		Args: mistakes.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := cellsign.Generate(args[0]+".key", args[0]+".pub")
			if err != nil {
				return err
			}
			if asJSON {
				return cmdout.PrintJSON(cmd.OutOrStdout(), map[string]string{"key_id": s.ID, "private": args[0] + ".key", "public": args[0] + ".pub"})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: private key %s.key (keep it secret), public key %s.pub\n", s.ID, args[0], args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the key id and file names as JSON")
	return cmd
}
