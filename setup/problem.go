package setup

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// Problem is one prerequisite of a run that does not hold: what is wrong
// and how to fix it. Subject names the thing (a setting, the role, a table
// or column, the pipeline, the state file) so that a person or a script
// can group problems.
type Problem struct {
	Subject string `json:"subject"`
	What    string `json:"problem"`
	Fix     string `json:"fix,omitempty"`
	err     error  // the error it was made from, if any: errors.As reaches it
}

func (p *Problem) Error() string {
	if p.Fix == "" {
		return p.What
	}
	return p.What + " (" + p.Fix + ")"
}

func (p *Problem) Unwrap() error { return p.err }

// Refuse is a Problem as a fatal error: retrying cannot fix it.
func Refuse(subject, what, fix string) error {
	return fatal.Wrap(&Problem{Subject: subject, What: what, Fix: fix})
}

// Problems is every problem one look at the prerequisites found. A run
// refuses with all of them at once, and check lists them, so that a user
// fixes a new database in one pass, not one refusal at a time.
type Problems []*Problem

func (ps Problems) Error() string {
	if len(ps) == 1 {
		return ps[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(ps))
	for i, p := range ps {
		fmt.Fprintf(&b, " %d) %s;", i+1, p.Error())
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap lets errors.As find a problem's cause (a decode.RefusalError, say).
func (ps Problems) Unwrap() []error {
	out := make([]error, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

// Found collects what one look at the prerequisites finds.
type Found struct{ List Problems }

// Add records err when it is a refusal (fatal: a setting or the schema is
// wrong) and reports whether it did; any other error (a connection that
// failed, a query that timed out) is not a problem of the prerequisites,
// and the caller returns it.
func (ps *Found) Add(subject string, err error) bool {
	if err == nil || !fatal.Is(err) {
		return false
	}
	var p *Problem
	if errors.As(err, &p) {
		ps.List = append(ps.List, p)
		return true
	}
	var re *decode.RefusalError
	if errors.As(err, &re) {
		subject = re.Table
		if re.Column != "" {
			subject += "." + re.Column
		}
	}
	ps.List = append(ps.List, &Problem{Subject: subject, What: err.Error(), err: err})
	return true
}

// Err is the collected problems as one fatal error, or nil.
func (ps *Found) Err() error {
	if len(ps.List) == 0 {
		return nil
	}
	return fatal.Wrap(ps.List)
}
