package tunnel

// recvLoopStopForTest makes the session deaf and mute without closing the connection, as a
// hung peer would be: the socket stays open but nothing is read or answered.
func (s *Session) recvLoopStopForTest() {
	s.cancel(nil)
}
