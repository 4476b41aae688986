"""flushless: measure and remove the IOTLB flushes a Xen PV domain pays for page-table pages."""

__version__ = "0.1.0"
