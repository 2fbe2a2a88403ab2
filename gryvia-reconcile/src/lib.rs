//! reconcile
