package keyspace

import (
	"encoding/binary"
	"fmt"
)

// Cursor is a position in the cell's history: for each shard, the last
// revision seen. Clients treat its encoding as opaque.
type Cursor []uint64

const cursorVersion = 1

// Encode returns the wire form of c.
func (c Cursor) Encode() []byte {
	b := make([]byte, 0, 2+len(c)*3)
	b = append(b, cursorVersion)
	b = binary.AppendUvarint(b, uint64(len(c)))
	for _, r := range c {
		b = binary.AppendUvarint(b, r)
	}
	return b
}

// DecodeCursor parses a cursor of a cell with shards shards.
func DecodeCursor(b []byte, shards uint32) (Cursor, error) {
	if len(b) == 0 || b[0] != cursorVersion {
		return nil, fmt.Errorf("cursor: unknown encoding")
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n != uint64(shards) {
		return nil, fmt.Errorf("cursor: made for %d shards, this cell has %d", n, shards)
	}
	b = b[k:]
	c := make(Cursor, n)
	for i := range c {
		if c[i], k = binary.Uvarint(b); k <= 0 {
			return nil, fmt.Errorf("cursor: truncated")
		}
		b = b[k:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("cursor: %d trailing bytes", len(b))
	}
	return c, nil
}

// Clone returns a copy of c.
func (c Cursor) Clone() Cursor { return append(Cursor(nil), c...) }
