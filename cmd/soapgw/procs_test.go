package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/soapgw/soapgw/internal/config"
)

func TestSyncsEachMessage(t *testing.T) {
	assert.False(t, syncsEachMessage(&config.Config{Edge: &config.EdgeConfig{}, Origin: &config.OriginConfig{}}))
	assert.True(t, syncsEachMessage(&config.Config{Edge: &config.EdgeConfig{OneWay: &config.EdgeOneWay{}}}), "the edge's spool")
	assert.True(t, syncsEachMessage(&config.Config{Origin: &config.OriginConfig{OneWay: &config.OriginOneWay{}}}), "the origin's ledger")
}
