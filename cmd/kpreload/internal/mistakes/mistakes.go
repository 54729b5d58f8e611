// Package mistakes answers a user's mistakes the same way at every depth of
// the kpreload command tree: an unknown subcommand of any group, an unknown
// flag of any command, too few or too many arguments, and names that break
// kmodcache/names each get one error that says what was expected and, where
// one is near, what was probably meant.
package mistakes

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// ArgsNote is the annotation key under which a command names what its
// positional arguments are ("the driver version or branch to switch to"), for
// the error a missing argument gets. Without it the error names the
// placeholders of the command's Use line.
const ArgsNote = "kpreload/args"

// Guard makes every group of the tree refuse an unknown child, and every
// command suggest the nearest flag for an unknown one. clirun.NewRoot calls
// it once the tree is complete, clirun.WithCompletion again for the
// completion command.
func Guard(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.SetFlagErrorFunc(flagError)
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() {
			// cobra validates a group's arguments only at the root (and
			// prints a group's help for any word it does not know, exit
			// status 0): a group here runs, and refuses any argument.
			c.Args = unknownChild
			if c.Run == nil && c.RunE == nil {
				c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
			}
		} else if c.HasParent() && c.Parent().Name() == "completion" {
			c.Args = NoArgs // cobra's own: "unknown command" for an argument
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

// unknownChild is the Args of every group: a group takes no arguments, so its
// first argument is a subcommand it does not have.
func unknownChild(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return unknownCommandError(cmd, args[0])
}

// unknownCommandError says that group has no child typed, with the nearest
// children (cobra's Levenshtein distance and prefix rule), else all of them.
func unknownCommandError(group *cobra.Command, typed string) error {
	if group.SuggestionsMinimumDistance <= 0 {
		group.SuggestionsMinimumDistance = 2
	}
	var b strings.Builder
	fmt.Fprintf(&b, "unknown command %q for %q", typed, group.CommandPath())
	if s := group.SuggestionsFor(typed); len(s) > 0 {
		b.WriteString("\n\nDid you mean this?\n")
		for _, n := range s {
			fmt.Fprintf(&b, "\t%s\n", n)
		}
		fmt.Fprintf(&b, "\nRun '%s --help' for its commands.", group.CommandPath())
	} else {
		var names []string
		for _, c := range group.Commands() {
			if c.IsAvailableCommand() {
				names = append(names, c.Name())
			}
		}
		fmt.Fprintf(&b, "; its commands: %s (run '%s --help')", strings.Join(names, ", "), group.CommandPath())
	}
	return errors.New(b.String())
}

// flagError is the root's FlagErrorFunc, which every command inherits: an
// unknown flag gets the nearest flag the command takes.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	var typed string
	switch {
	case strings.HasPrefix(msg, "unknown flag: --"):
		typed = strings.TrimPrefix(msg, "unknown flag: --")
	case strings.HasPrefix(msg, "unknown shorthand flag: "):
		// "unknown shorthand flag: 'j' in -json": -json meant --json
		if _, word, ok := strings.Cut(msg, " in -"); ok {
			typed = word
		}
	default:
		return fmt.Errorf("%s: %w", strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), err)
	}
	typed, _, _ = strings.Cut(typed, "=")
	if near := nearestFlag(cmd.Flags(), typed); near != "" {
		return fmt.Errorf("%w; did you mean --%s?", err, near)
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, "--"+f.Name)
		}
	})
	sort.Strings(names)
	return fmt.Errorf("%w (%s takes %s)", err, cmd.CommandPath(), strings.Join(names, ", "))
}

// nearestFlag returns the visible flag of fs closest to typed: the one typed
// is a prefix of, else the one within an edit distance of a third of its
// length (at least 2), else "".
func nearestFlag(fs *pflag.FlagSet, typed string) string {
	typed = strings.ToLower(typed)
	best, bestD := "", -1
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || typed == "" {
			return
		}
		d := editDistance(typed, strings.ToLower(f.Name))
		if strings.HasPrefix(f.Name, typed) {
			d = 0
		}
		if bestD < 0 || d < bestD {
			best, bestD = f.Name, d
		}
	})
	if bestD < 0 || bestD > max(2, len(typed)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, with a transposition
// of two neighbours counted as one edit ("cahce" is one edit from "cache").
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// NoArgs is the Args of a command that takes no positional argument.
func NoArgs(cmd *cobra.Command, args []string) error { return RangeArgs(0, 0)(cmd, args) }

// ExactArgs is the Args of a command that takes exactly n arguments.
func ExactArgs(n int) cobra.PositionalArgs { return RangeArgs(n, n) }

// MinArgs is the Args of a command that takes at least n arguments.
func MinArgs(n int) cobra.PositionalArgs { return RangeArgs(n, -1) }

// MaxArgs is the Args of a command that takes at most n arguments.
func MaxArgs(n int) cobra.PositionalArgs { return RangeArgs(0, n) }

// RangeArgs is the Args of a command that takes lo to hi arguments (hi < 0:
// no upper bound). The error names what the arguments are (the ArgsNote
// annotation, else the Use line's placeholders) and the usage, instead of
// cobra's "accepts 1 arg(s), received 0".
func RangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		n := len(args)
		if n >= lo && (hi < 0 || n <= hi) {
			return nil
		}
		usage, what := usageLine(cmd)
		if note := cmd.Annotations[ArgsNote]; note != "" {
			if what != "" && !strings.HasSuffix(note, ")") {
				what = note + " (" + what + ")"
			} else {
				what = note
			}
		}
		name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
		if n < lo {
			if n == 0 {
				return fmt.Errorf("%s needs %s: %s", name, what, usage)
			}
			return fmt.Errorf("%s needs %s, got only %s: %s", name, what, quoteArgs(args), usage)
		}
		switch hi {
		case 0:
			return fmt.Errorf("%s takes no arguments, got %s: %s", name, quoteArgs(args), usage)
		case 1:
			return fmt.Errorf("%s takes one argument, %s; got %d: %s: %s", name, what, n, quoteArgs(args), usage)
		}
		return fmt.Errorf("%s takes at most %d arguments, %s; got %d: %s: %s", name, hi, what, n, quoteArgs(args), usage)
	}
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, " ")
}

// usageLine returns the synopsis of cmd for an arguments error, from its Use
// line (its first form when the forms repeat the name, optional flags folded
// into [flags]), and the placeholders of its positional arguments.
func usageLine(cmd *cobra.Command) (usage, positional string) {
	use := cmd.Use
	forms := splitTop(use, " | ")
	if len(forms) > 1 && strings.HasPrefix(forms[1], cmd.Name()+" ") {
		use = forms[0]
	}
	var kept, pos []string
	folded := false
	words := splitTop(use, " ")
	for i := 1; i < len(words); i++ {
		w := words[i]
		switch {
		case strings.HasPrefix(w, "[-"):
			folded = true
			continue
		case strings.HasPrefix(w, "-"):
			kept = append(kept, w)
			if i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") && !strings.HasPrefix(words[i+1], "[") && words[i+1] != "|" {
				i++
				kept = append(kept, words[i])
			}
			continue
		case w != "|" && w != "[flags]":
			pos = append(pos, w)
		}
		kept = append(kept, w)
	}
	parent := ""
	if cmd.HasParent() {
		parent = cmd.Parent().CommandPath() + " "
	}
	usage = strings.Join(append([]string{parent + cmd.Name()}, kept...), " ")
	if folded {
		usage += " [flags]"
	}
	return usage, strings.Join(pos, " ")
}

// splitTop splits s at sep where sep is outside brackets and parentheses.
func splitTop(s, sep string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		}
		if depth == 0 && strings.HasPrefix(s[i:], sep) {
			out = append(out, s[start:i])
			start = i + len(sep)
			i += len(sep) - 1
		}
	}
	return append(out, s[start:])
}
