//! Windows backend on IP Helper (windows-sys): being written; see issue 4.
