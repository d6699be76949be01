package sqlstore

import "homework/engine/spec"

var _ spec.ReadStore = Reads{}
