// Package codecheck holds checks of the module's code itself that no
// compiler or linter makes: no function longer than MaxFunctionLines lines,
// so that the long steps of an exchange (the AS2 and AS4 endpoints, the
// S/MIME and WS-Security layers, the send commands, the store kits) read as
// a sequence of named steps.
//
// A function that must stay long says why in its doc comment with a line
//
//	//gateway:long <reason>
//
// and is then not counted.
package codecheck

// MaxFunctionLines is the most lines a function body may have (the lines
// between its braces).
const MaxFunctionLines = 200

// LongDirective marks a function allowed to be longer than
// MaxFunctionLines; a reason must follow it.
const LongDirective = "//gateway:long"
