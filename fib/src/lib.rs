//! tern-fib: the kernel FIB.
