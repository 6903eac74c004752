package server

// mountProtocols registers the protocol endpoints on the mux.
func (s *Server) mountProtocols() error {
	return nil
}
