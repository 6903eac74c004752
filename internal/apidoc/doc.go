// Package apidoc holds the checks of the module's Go documentation: every
// package outside internal/ is API a plug-in author or an embedding program
// may import, so each one must say what it is in a package comment.
package apidoc
