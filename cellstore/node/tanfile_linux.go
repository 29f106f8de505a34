package node

import "syscall"

// allocate gives the file fd size bytes of disk, its size included.
func allocate(fd int, size int64) error { return syscall.Fallocate(fd, 0, 0, size) }
