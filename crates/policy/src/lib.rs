//! Coordination policy shared by `tandem sim` and the host/guest daemons.
