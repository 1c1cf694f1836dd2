// Package hooks reads OCI hook configuration files, the JSON format of
// oci-hooks(5) that CRI-O and Podman read from
// /usr/share/containers/oci/hooks.d and /etc/containers/oci/hooks.d, and
// adds the hooks whose conditions a container meets to its OCI spec, for
// the OCI runtime to run.
//
// It is written after containers/common's pkg/hooks (the implementation
// CRI-O uses), whose behaviour it keeps where oci-hooks(5) leaves room:
// unanchored regular expressions in Go's syntax, the "prestart" stage
// injected as createRuntime, an invalid file skipped (a same-named file of
// an earlier directory stays in force), legacy 0.1.0 files matching when
// any of their conditions does.
package hooks

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Version is the current hook schema version.
const Version = "1.0.0"

// legacyVersion is the 0.1.0 schema: no "version" key, or "0.1.0".
const legacyVersion = "0.1.0"

// Stages are the OCI runtime spec's hook stages a hook may name.
var Stages = []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}

// Hook is a hook configuration file in the 1.0.0 schema.
type Hook struct {
	Version string     `json:"version"`
	Hook    specs.Hook `json:"hook"`
	When    When       `json:"when"`
	Stages  []string   `json:"stages"`
}

// When holds the conditions under which a hook is injected. Every
// condition that is set must match (at least one must be set).
type When struct {
	// Always, when true, matches every container; when false, none.
	Always *bool `json:"always,omitempty"`
	// Annotations maps key regular expressions to value regular
	// expressions: each pair must match one of the container's
	// annotations.
	Annotations map[string]string `json:"annotations,omitempty"`
	// Commands are regular expressions, one of which must match the
	// container's process.args[0].
	Commands []string `json:"commands,omitempty"`
	// HasBindMounts, when true, matches a container the client asked
	// host bind mounts for.
	HasBindMounts *bool `json:"hasBindMounts,omitempty"`
}

// Config is a validated hook file, its regular expressions compiled.
type Config struct {
	// Name is the file's name, which orders hooks and masks same-named
	// files of earlier directories.
	Name string
	// Path is the file the hook was read from.
	Path   string
	Hook   specs.Hook
	Stages []string

	always        *bool
	hasBindMounts *bool
	annotations   []annotationCond
	commands      []*regexp.Regexp
	// anyOf is the 0.1.0 semantics: one matching condition suffices.
	anyOf bool
}

type annotationCond struct{ key, value *regexp.Regexp }

// ReadFile reads and validates the hook file at path.
func ReadFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, err
	}
	c.Name, c.Path = filepath.Base(path), path
	return c, nil
}

// Parse reads and validates a hook file's content, in the 1.0.0 schema
// or the legacy 0.1.0 one.
func Parse(data []byte) (*Config, error) {
	var ver struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(data, &ver); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	var h *Hook
	anyOf := false
	switch ver.Version {
	case Version:
		h = &Hook{}
		if err := json.Unmarshal(data, h); err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
	case "", legacyVersion:
		var err error
		if h, err = parseLegacy(data); err != nil {
			return nil, err
		}
		anyOf = true
	default:
		return nil, fmt.Errorf("unknown hook version %q (want %s or the legacy %s)", ver.Version, Version, legacyVersion)
	}
	c, err := compile(h)
	if err != nil {
		return nil, err
	}
	c.anyOf = anyOf
	return c, nil
}

// compile validates h and compiles its conditions.
func compile(h *Hook) (*Config, error) {
	p := h.Hook.Path
	if p == "" {
		return nil, errors.New("hook.path is required")
	}
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("hook.path %q must be absolute", p)
	}
	// As CRI-O: a hook whose program is missing would fail every
	// container it matches.
	if _, err := os.Stat(p); err != nil {
		return nil, fmt.Errorf("hook.path: %w", err)
	}
	if h.Hook.Timeout != nil && *h.Hook.Timeout <= 0 {
		return nil, fmt.Errorf("hook.timeout %d must be positive", *h.Hook.Timeout)
	}
	w := h.When
	if w.Always == nil && w.HasBindMounts == nil && len(w.Annotations) == 0 && len(w.Commands) == 0 {
		return nil, errors.New("when: at least one of always, annotations, commands, hasBindMounts is required")
	}
	if len(h.Stages) == 0 {
		return nil, errors.New("stages is required")
	}
	for _, s := range h.Stages {
		if !knownStage(s) {
			return nil, fmt.Errorf("unknown stage %q (want one of %s)", s, strings.Join(Stages, ", "))
		}
	}
	c := &Config{
		Hook:          h.Hook,
		Stages:        h.Stages,
		always:        w.Always,
		hasBindMounts: w.HasBindMounts,
	}
	for k, v := range w.Annotations {
		kre, err := regexp.Compile(k)
		if err != nil {
			return nil, fmt.Errorf("when.annotations key %q: %w", k, err)
		}
		vre, err := regexp.Compile(v)
		if err != nil {
			return nil, fmt.Errorf("when.annotations value %q: %w", v, err)
		}
		c.annotations = append(c.annotations, annotationCond{key: kre, value: vre})
	}
	for _, cmd := range w.Commands {
		re, err := regexp.Compile(cmd)
		if err != nil {
			return nil, fmt.Errorf("when.commands %q: %w", cmd, err)
		}
		c.commands = append(c.commands, re)
	}
	return c, nil
}

func knownStage(s string) bool {
	for _, k := range Stages {
		if s == k {
			return true
		}
	}
	return false
}

// legacyHook is the 0.1.0 schema, with its synonyms.
type legacyHook struct {
	Hook          *string  `json:"hook"`
	Arguments     []string `json:"arguments"`
	Stages        []string `json:"stages"`
	Stage         []string `json:"stage"`
	Cmds          []string `json:"cmds"`
	Cmd           []string `json:"cmd"`
	Annotations   []string `json:"annotations"`
	Annotation    []string `json:"annotation"`
	HasBindMounts *bool    `json:"hasbindmounts"`
}

// parseLegacy converts a 0.1.0 file to the 1.0.0 schema, as
// containers/common does: its annotation patterns match any annotation's
// value.
func parseLegacy(data []byte) (*Hook, error) {
	var l legacyHook
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("parse (0.1.0): %w", err)
	}
	if l.Hook == nil {
		return nil, errors.New("hook is required (0.1.0)")
	}
	pick := func(a, b []string, names string) ([]string, error) {
		if a != nil && b != nil {
			return nil, fmt.Errorf("%s: set one, not both (0.1.0)", names)
		}
		if a == nil {
			return b, nil
		}
		return a, nil
	}
	stages, err := pick(l.Stages, l.Stage, "stages and stage")
	if err != nil {
		return nil, err
	}
	cmds, err := pick(l.Cmds, l.Cmd, "cmds and cmd")
	if err != nil {
		return nil, err
	}
	annotations, err := pick(l.Annotations, l.Annotation, "annotations and annotation")
	if err != nil {
		return nil, err
	}
	h := &Hook{
		Version: legacyVersion,
		Hook:    specs.Hook{Path: *l.Hook},
		When:    When{Commands: cmds, HasBindMounts: l.HasBindMounts},
		Stages:  stages,
	}
	if l.Arguments != nil {
		h.Hook.Args = append([]string{*l.Hook}, l.Arguments...)
	}
	if annotations != nil {
		h.When.Annotations = map[string]string{".*": strings.Join(annotations, "|")}
	}
	return h, nil
}
