// Command hello is the tiny static program the image tests pack.
package main

import "fmt"

func main() { fmt.Println("hello from a hami-go test image") }
