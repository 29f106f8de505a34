package storev1

import "hash/crc32"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// UpdateBackupCRC returns crc updated with data: a BackupChunk's crc32c is
// this over its shard's data, from 0.
func UpdateBackupCRC(crc uint32, data []byte) uint32 {
	return crc32.Update(crc, castagnoli, data)
}
