"""The Metal backend: Metal Shading Language from the kernel IR (rendered anywhere), and a
`pyobjc-framework-Metal` runtime that runs only on Apple hardware."""
