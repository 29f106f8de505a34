package faults

// knownVersion is what a model knows of a key's version. Usually the
// version itself; after a write nobody saw take effect (an ambiguous
// commit, or one whose reply named no revision) only that it is above
// Floor, since versions only grow, until an operation shows it.
type knownVersion struct {
	Version uint64
	Known   bool
	Floor   uint64
}

// floor is a version the key's current one is at least.
func (v knownVersion) floor() uint64 {
	if v.Known {
		return v.Version
	}
	return v.Floor
}

// mayBe reports whether the key's version may be x.
func (v knownVersion) mayBe(x uint64) bool {
	if v.Known {
		return v.Version == x
	}
	return x > v.Floor
}

// seen is the knowledge after an operation showed the version x.
func (v knownVersion) seen(x uint64) knownVersion { return knownVersion{Version: x, Known: true} }

// written is the knowledge after a write took effect at version x (0:
// at a version nobody saw); ok is false if x cannot follow the version
// before.
func (v knownVersion) written(x uint64) (ok bool, next knownVersion) {
	if x == 0 {
		return true, knownVersion{Floor: v.floor()}
	}
	return x > v.floor(), v.seen(x)
}
