package dkms

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
)

// Conf is what ReadConf understood of a dkms.conf. Values are raw: quotes and
// escapes are removed as the shell would, but variable references such as
// $kernelver or ${kernel_source_dir} are kept unexpanded, because dkms expands
// them per kernel at build time.
type Conf struct {
	// PackageName is PACKAGE_NAME: the dkms module name (the -m argument).
	PackageName string
	// PackageVersion is PACKAGE_VERSION: the dkms module version (the -v argument).
	PackageVersion string
	// BuiltModuleName holds BUILT_MODULE_NAME[i] by index ("" where unset).
	BuiltModuleName []string
	// BuiltModuleLocation holds BUILT_MODULE_LOCATION[i] by index.
	BuiltModuleLocation []string
	// DestModuleName holds DEST_MODULE_NAME[i] by index.
	DestModuleName []string
	// DestModuleLocation holds DEST_MODULE_LOCATION[i] by index.
	DestModuleLocation []string
	// Make holds MAKE[i] by index: the build commands (MAKE[0] is the default).
	Make []string
	// MakeMatch holds MAKE_MATCH[i]: the kernel regexp that selects MAKE[i].
	MakeMatch []string
	// Clean is CLEAN: the command dkms runs to clean the build directory.
	Clean string
	// Autoinstall is AUTOINSTALL, raw; dkms 3 treats any non-empty value as yes.
	Autoinstall string
	// BuildExclusiveKernel is BUILD_EXCLUSIVE_KERNEL: a regexp of kernels to build for.
	BuildExclusiveKernel string
	// BuildExclusiveArch is BUILD_EXCLUSIVE_ARCH: a regexp of architectures to build for.
	BuildExclusiveArch string
	// BuildExclusiveConfig is BUILD_EXCLUSIVE_CONFIG: kernel config options required (or, with "!", refused).
	BuildExclusiveConfig string
	// Vars holds every assignment ReadConf parsed, by name; array elements are
	// keyed "NAME[i]". Later assignments replace earlier ones, as in the shell.
	Vars map[string]string
	// Unparsed lists the lines (as "N: text") that are not plain assignments,
	// such as shell conditionals; dkms would run them, ReadConf does not.
	Unparsed []string
}

// Module is one kernel module a dkms package builds, with dkms's defaults applied.
type Module struct {
	// BuiltName is the module's file name without ".ko" in the build directory.
	BuiltName string
	// BuiltLocation is the subdirectory of the build directory holding it ("" for the top).
	BuiltLocation string
	// DestName is the installed module's name without ".ko".
	DestName string
	// DestLocation is where dkms would install it under /lib/modules/<kver>.
	DestLocation string
}

// Modules returns the modules the package builds, one per index of the
// BUILT_MODULE_NAME / DEST_MODULE_* arrays, with dkms's defaults applied:
// an unset built name is PACKAGE_NAME when there is a single
// DEST_MODULE_LOCATION, and an unset destination name is the built name.
func (c *Conf) Modules() []Module {
	n := max(len(c.BuiltModuleName), len(c.BuiltModuleLocation), len(c.DestModuleName), len(c.DestModuleLocation))
	mods := make([]Module, 0, n)
	for i := range n {
		m := Module{
			BuiltName:     at(c.BuiltModuleName, i),
			BuiltLocation: at(c.BuiltModuleLocation, i),
			DestName:      at(c.DestModuleName, i),
			DestLocation:  at(c.DestModuleLocation, i),
		}
		if m.BuiltName == "" && len(c.DestModuleLocation) == 1 {
			m.BuiltName = c.PackageName
		}
		if m.DestName == "" {
			m.DestName = m.BuiltName
		}
		mods = append(mods, m)
	}
	return mods
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// maxConf bounds a dkms.conf (real ones are a few KiB).
const maxConf = 1 << 20

// ReadConf reads and parses the dkms.conf at path; see ParseConf.
func ReadConf(path string) (*Conf, error) {
	// A source tree comes from outside: a dkms.conf that is a FIFO or a
	// device is refused, never waited on, and at most maxConf is read.
	data, err := inroot.ReadPath(path, maxConf)
	if err != nil {
		return nil, fmt.Errorf("read dkms.conf: %w", err)
	}
	c, err := ParseConf(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return c, nil
}

// assignRE matches the start of a shell assignment: NAME= or NAME[index]=.
var assignRE = regexp.MustCompile(`^(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)(?:\[([0-9]+)\])?=`)

// maxArrayIndex bounds array indexes so that a hostile file cannot make
// ParseConf allocate huge slices.
const maxArrayIndex = 4096

// ParseConf parses dkms.conf text written in shell-assignment syntax:
// NAME=value and NAME[i]=value, with double-quoted, single-quoted or bare
// values, backslash escapes, line continuations, multi-line quoted values
// and comments. It does not run anything: lines that are not assignments are
// listed in Conf.Unparsed. It fails only on text no shell would accept as an
// assignment, such as an unterminated quote.
func ParseConf(r io.Reader) (*Conf, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read dkms.conf: %w", err)
	}
	c := &Conf{Vars: map[string]string{}}
	p := &confParser{src: string(data), line: 1}
	for !p.eof() {
		p.skipBlank()
		if p.eof() {
			break
		}
		startLine, start := p.line, p.pos
		m := assignRE.FindStringSubmatch(p.rest())
		if m == nil {
			text := p.skipLine()
			if t := strings.TrimSpace(text); t != "" && !strings.HasPrefix(t, "#") {
				c.Unparsed = append(c.Unparsed, fmt.Sprintf("%d: %s", startLine, t))
			}
			continue
		}
		p.pos += len(m[0])
		val, err := p.word()
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", startLine, err)
		}
		// What may follow a value: blanks, then the end of the line, a
		// comment, ";" and another statement, or another assignment
		// ("A=1 B=2"). Anything else ("A=1 command") makes the line a
		// command with an environment, not an assignment.
		p.skipSpaces()
		if !p.eof() && !strings.ContainsRune("\n#;", rune(p.peek())) && !assignRE.MatchString(p.rest()) {
			p.skipLine()
			c.Unparsed = append(c.Unparsed, fmt.Sprintf("%d: %s", startLine, strings.TrimSpace(p.src[start:p.pos])))
			continue
		}
		if err := c.set(m[1], m[2], val); err != nil {
			return nil, fmt.Errorf("line %d: %w", startLine, err)
		}
		if !p.eof() && p.peek() == '#' {
			p.skipLine()
		}
	}
	return c, nil
}

func (c *Conf) set(name, index, val string) error {
	key := name
	if index != "" {
		i, err := strconv.Atoi(index)
		if err != nil || i > maxArrayIndex {
			return fmt.Errorf("array index %s[%s] out of range (max %d)", name, index, maxArrayIndex)
		}
		key = fmt.Sprintf("%s[%d]", name, i)
		var arr *[]string
		switch name {
		case "BUILT_MODULE_NAME":
			arr = &c.BuiltModuleName
		case "BUILT_MODULE_LOCATION":
			arr = &c.BuiltModuleLocation
		case "DEST_MODULE_NAME":
			arr = &c.DestModuleName
		case "DEST_MODULE_LOCATION":
			arr = &c.DestModuleLocation
		case "MAKE":
			arr = &c.Make
		case "MAKE_MATCH":
			arr = &c.MakeMatch
		}
		if arr != nil {
			for len(*arr) <= i {
				*arr = append(*arr, "")
			}
			(*arr)[i] = val
		}
	} else {
		switch name {
		case "PACKAGE_NAME":
			c.PackageName = val
		case "PACKAGE_VERSION":
			c.PackageVersion = val
		case "CLEAN":
			c.Clean = val
		case "AUTOINSTALL":
			c.Autoinstall = val
		case "BUILD_EXCLUSIVE_KERNEL":
			c.BuildExclusiveKernel = val
		case "BUILD_EXCLUSIVE_ARCH":
			c.BuildExclusiveArch = val
		case "BUILD_EXCLUSIVE_CONFIG":
			c.BuildExclusiveConfig = val
		case "MAKE":
			// In bash, NAME=value on an array sets element 0.
			setIndex0(&c.Make, val)
		case "BUILT_MODULE_NAME":
			setIndex0(&c.BuiltModuleName, val)
		case "BUILT_MODULE_LOCATION":
			setIndex0(&c.BuiltModuleLocation, val)
		case "DEST_MODULE_NAME":
			setIndex0(&c.DestModuleName, val)
		case "DEST_MODULE_LOCATION":
			setIndex0(&c.DestModuleLocation, val)
		case "MAKE_MATCH":
			setIndex0(&c.MakeMatch, val)
		}
	}
	c.Vars[key] = val
	return nil
}

func setIndex0(arr *[]string, val string) {
	if len(*arr) == 0 {
		*arr = append(*arr, "")
	}
	(*arr)[0] = val
}

// confParser walks dkms.conf text one shell word at a time.
type confParser struct {
	src  string
	pos  int
	line int
}

func (p *confParser) eof() bool    { return p.pos >= len(p.src) }
func (p *confParser) peek() byte   { return p.src[p.pos] }
func (p *confParser) rest() string { return p.src[p.pos:] }

func (p *confParser) advance() {
	if p.src[p.pos] == '\n' {
		p.line++
	}
	p.pos++
}

// skipSpaces skips blanks and backslash-newline continuations.
func (p *confParser) skipSpaces() {
	for !p.eof() {
		switch {
		case p.peek() == ' ' || p.peek() == '\t' || p.peek() == '\r':
			p.advance()
		case strings.HasPrefix(p.rest(), "\\\n"):
			p.advance()
			p.advance()
		default:
			return
		}
	}
}

// skipBlank skips blanks, empty lines and ";" separators.
func (p *confParser) skipBlank() {
	for !p.eof() {
		p.skipSpaces()
		if p.eof() || (p.peek() != '\n' && p.peek() != ';') {
			return
		}
		p.advance()
	}
}

// skipLine consumes the rest of the line, newline included, and returns it.
func (p *confParser) skipLine() string {
	start := p.pos
	for !p.eof() && p.peek() != '\n' {
		p.advance()
	}
	if !p.eof() {
		p.advance()
	}
	return p.src[start:p.pos]
}

// word reads one shell word (the value of an assignment) and returns it with
// quotes and escapes removed and variable references kept as written.
func (p *confParser) word() (string, error) {
	var b strings.Builder
	for !p.eof() {
		c := p.peek()
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ';':
			return b.String(), nil
		case c == '\'':
			startLine := p.line
			p.advance()
			end := strings.IndexByte(p.rest(), '\'')
			if end < 0 {
				return "", fmt.Errorf("unterminated single quote starting on line %d", startLine)
			}
			for range end {
				b.WriteByte(p.peek())
				p.advance()
			}
			p.advance()
		case c == '"':
			if err := p.doubleQuoted(&b); err != nil {
				return "", err
			}
		case c == '\\':
			p.advance()
			if p.eof() {
				return b.String(), nil
			}
			if p.peek() != '\n' { // backslash-newline is a continuation
				b.WriteByte(p.peek())
			}
			p.advance()
		case c == '$' && strings.HasPrefix(p.rest(), "$("):
			if err := p.balanced(&b, '(', ')'); err != nil {
				return "", err
			}
		case c == '$' && strings.HasPrefix(p.rest(), "${"):
			if err := p.balanced(&b, '{', '}'); err != nil {
				return "", err
			}
		case c == '`':
			startLine := p.line
			b.WriteByte(c)
			p.advance()
			end := strings.IndexByte(p.rest(), '`')
			if end < 0 {
				return "", fmt.Errorf("unterminated backquote starting on line %d", startLine)
			}
			for range end + 1 {
				b.WriteByte(p.peek())
				p.advance()
			}
		default:
			b.WriteByte(c)
			p.advance()
		}
	}
	return b.String(), nil
}

// doubleQuoted reads a "..." string. Inside it, a backslash escapes only
// $, `, ", \ and newline (removed), as in the shell.
func (p *confParser) doubleQuoted(b *strings.Builder) error {
	startLine := p.line
	p.advance()
	for !p.eof() {
		c := p.peek()
		switch c {
		case '"':
			p.advance()
			return nil
		case '\\':
			p.advance()
			if p.eof() {
				break
			}
			switch n := p.peek(); n {
			case '$', '`', '"', '\\':
				b.WriteByte(n)
			case '\n':
			default:
				b.WriteByte('\\')
				b.WriteByte(n)
			}
			p.advance()
		default:
			b.WriteByte(c)
			p.advance()
		}
	}
	return fmt.Errorf("unterminated double quote starting on line %d", startLine)
}

// balanced copies a $( ... ) or ${ ... } expansion verbatim, nesting included.
func (p *confParser) balanced(b *strings.Builder, open, closing byte) error {
	startLine := p.line
	depth := 0
	b.WriteByte(p.peek()) // '$'
	p.advance()
	for !p.eof() {
		c := p.peek()
		b.WriteByte(c)
		p.advance()
		switch c {
		case open:
			depth++
		case closing:
			depth--
			if depth == 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("unterminated $%c starting on line %d", open, startLine)
}
