package nomad

import "errors"

// ErrGone: the job no longer exists in Nomad (its user purged it between
// the cycle that decided an action and the action). Nothing is left to
// do: the action is skipped (SkipGone), not counted as a failure, and the
// model drops the job when Nomad's event arrives.
var ErrGone = errors.New("the job no longer exists (purged since the plan was decided)")

// SkipGone: the job was purged since the plan was decided.
const SkipGone = "the job was purged since the plan was decided; nothing to do"
