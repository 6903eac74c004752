package client

import "io"

// SpoolBody exposes the body Post sends.
func (o *Outgoing) SpoolBody() io.Reader { return o.body() }
