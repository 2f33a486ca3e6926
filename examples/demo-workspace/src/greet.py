"""A tiny program for the Tack demo: the scripted model runs it inside the sandbox."""
import sys


def greet(name: str) -> str:
    return f"Hello, {name}, from inside the sandbox!"


if __name__ == "__main__":
    print(greet(sys.argv[1] if len(sys.argv) > 1 else "world"))
