package tunnel

// recvLoopStopForTest makes the session deaf and mute without closing the connection, as a
// hung peer would be: the socket stays open but nothing is read or answered.
func (s *Session) recvLoopStopForTest() {
	s.cancel(nil)
}

// codecEpochs are the session's send epoch and the peer's epoch it last decoded in.
func (s *Session) codecEpochs() (send, recv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sendEpoch, s.recvEpoch.Load()
}

// retainedForTest is the CodecRetention budget in use and the coded messages awaiting an ack.
func (s *Session) retainedForTest() (bytes, messages int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retained, len(s.sent) - s.sentHead
}
